//! What a trapped guest said: the gist of the last lines of its stderr (an
//! uncaught Python or JavaScript exception, a Rust panic, else its last
//! words), for the reason a crashed attempt gives.

/// The gist of a trapped guest's stderr.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::wasm) enum Said {
    /// An exception nothing caught: its message (Python: with its type).
    Exception(String),
    /// Some other line: a panic, the last words.
    Line(String),
}

pub(super) fn summarise_stderr(tail: &[String]) -> Option<Said> {
    // Python: "Traceback (most recent call last):", indented frames, then
    // "ValueError: message" (a chained exception starts another traceback)
    if let Some(start) = tail
        .iter()
        .rposition(|l| l.trim_end() == "Traceback (most recent call last):")
        && let Some(line) = tail[start + 1..]
            .iter()
            .find(|l| !l.is_empty() && !l.starts_with(char::is_whitespace))
    {
        return Some(Said::Exception(line.trim().to_owned()));
    }
    let lines: Vec<&str> = tail
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    if let Some(stack) = lines.iter().rposition(|l| *l == "Stack:")
        && let Some(message) = lines[..stack].iter().rev().find(|l| !l.is_empty())
    {
        return Some(Said::Exception((*message).to_owned()));
    }
    let lines: Vec<&str> = lines
        .into_iter()
        .filter(|l| !l.starts_with("Redirecting call to abort()"))
        .collect();
    match lines.iter().rposition(|l| l.contains("panicked at")) {
        Some(i) => Some(Said::Line(
            lines[i..]
                .iter()
                .take(2)
                .copied()
                .collect::<Vec<_>>()
                .join(" "),
        )),
        None => lines.last().map(|l| Said::Line((*l).to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::{Said, summarise_stderr};

    fn said(text: &str) -> Option<Said> {
        summarise_stderr(&text.lines().map(str::to_owned).collect::<Vec<_>>())
    }

    #[test]
    fn a_python_traceback_gives_the_exception_that_ended_it() {
        let stderr = "Traceback (most recent call last):\n  File \"/0/app.py\", line 3, in handle\n    \
                      raise KeyError(1)\nKeyError: 1\n\nDuring handling of the above exception, another \
                      exception occurred:\n\nTraceback (most recent call last):\n  File \"/0/app.py\", \
                      line 5, in handle\nValueError: the amount is negative\nthread '<unnamed>' (1) \
                      panicked at runtime/src/lib.rs:1280:25:\nPython function threw an unexpected exception\n";
        assert_eq!(
            said(stderr),
            Some(Said::Exception("ValueError: the amount is negative".into()))
        );
    }

    #[test]
    fn a_javascript_exception_gives_its_message() {
        let stderr = "Error: order 1042 has no customer\nStack:\n  handle@probe.js:22:11\n\
                      Redirecting call to abort() to mozalloc_abort\n";
        assert_eq!(
            said(stderr),
            Some(Said::Exception("Error: order 1042 has no customer".into()))
        );
    }

    #[test]
    fn a_rust_panic_gives_where_and_what() {
        let stderr = "thread '<unnamed>' panicked at src/lib.rs:9:5:\nno order id\nnote: run with \
                      `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            said(stderr),
            Some(Said::Line(
                "thread '<unnamed>' panicked at src/lib.rs:9:5: no order id".into()
            ))
        );
    }
}
