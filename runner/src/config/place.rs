//! Where in `queues.toml` an error is: line and column of a byte offset,
//! and the key whose value starts there; and `${NAME}` in values, whose
//! errors are placed the same way.

/// An error at a byte range of the file.
pub(super) type Invalid = (std::ops::Range<usize>, String);

/// Replace `${NAME}` with the variable's value, so secrets stay out of the file.
pub(super) fn expand_env(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start + 2..].find('}') else {
            return Err(format!("unclosed ${{ in {text:?}"));
        };
        let name = &rest[start + 2..start + 2 + len];
        let value = std::env::var(name)
            .map_err(|_| format!("${{{name}}} is not set in the environment"))?;
        out.push_str(&value);
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The key whose value starts at `offset`, from the line it is on:
/// `timeout = "5 parsecs"` gives `timeout`, `backoff = { base = "x" }` gives
/// `backoff.base`.
pub(super) fn field_at(text: &str, offset: usize) -> Option<String> {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let before = &text[line_start..offset];
    let is_key = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut keys: Vec<(usize, &str)> = Vec::new();
    for (i, _) in before.match_indices('=') {
        let head = before[..i].trim_end();
        // the key: the run of key characters (all ASCII) that ends the head
        let len = head.chars().rev().take_while(|&c| is_key(c)).count();
        if len > 0 {
            let start = head.len() - len;
            keys.push((start, &head[start..]));
        }
    }
    let (last_at, last) = *keys.last()?;
    match keys.first() {
        Some(&(first_at, first))
            if first_at < last_at && before[first_at..last_at].contains('{') =>
        {
            Some(format!("{first}.{last}"))
        }
        _ => Some(last.to_owned()),
    }
}

pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}
