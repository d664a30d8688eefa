//! Which text `/metrics` answers in: OpenMetrics 1.0 (what prometheus-client
//! writes, and what Prometheus asks for first) or the classic Prometheus
//! text format 0.0.4 (what `curl`, many agents and anything that sends no
//! `Accept` header read), chosen from the request's `Accept` header.

/// OpenMetrics' content type.
pub(super) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic text format's content type.
pub(super) const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request with `accept` gets OpenMetrics: only when it names
/// `application/openmetrics-text` with a higher preference than the classic
/// format (`text/plain`, or a wildcard that covers it). No header, `*/*`,
/// `text/plain` or a tie get the classic format.
pub(super) fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let (mut openmetrics, mut classic) = (0.0_f32, 0.0_f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, v)| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0)
            .clamp(0.0, 1.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(q),
            "text/plain" | "text/*" | "*/*" => classic = classic.max(q),
            _ => {}
        }
    }
    openmetrics > 0.0 && openmetrics > classic
}

/// The classic text format (0.0.4) of an OpenMetrics exposition: a counter's
/// family takes its samples' `_total` name (so its HELP and TYPE describe the
/// samples), `unknown` reads `untyped`, `# UNIT`, `# EOF`, exemplars and
/// counters' `_created` samples go, and HELP keeps only the escapes the
/// classic format has (`\\` and `\n`).
pub(super) fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = family_name(name, &counters);
            out.push_str(&format!("# HELP {name} {}\n", help.replace("\\\"", "\"")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let kind = match kind {
                "counter" | "gauge" | "histogram" | "summary" => kind,
                _ => "untyped",
            };
            out.push_str(&format!("# TYPE {} {kind}\n", family_name(name, &counters)));
        } else if line.starts_with('#') {
            continue;
        } else {
            let sample = without_exemplar(line);
            let name = sample.split(['{', ' ']).next().unwrap_or("");
            if name
                .strip_suffix("_created")
                .is_some_and(|family| counters.contains(family))
            {
                continue;
            }
            out.push_str(sample);
            out.push('\n');
        }
    }
    out
}

/// A family's name in the classic format: a counter's is its samples'.
fn family_name(name: &str, counters: &std::collections::HashSet<&str>) -> String {
    if counters.contains(name) {
        format!("{name}_total")
    } else {
        name.to_owned()
    }
}

/// A sample line without its exemplar (` # {labels} value`), which the
/// classic format does not have. Label values may hold ` # `: the exemplar
/// is looked for after the label set.
fn without_exemplar(line: &str) -> &str {
    let after_labels = match line.find('{') {
        Some(open) => {
            let (mut quoted, mut escaped) = (false, false);
            let mut end = line.len();
            for (i, c) in line[open..].char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' if quoted => escaped = true,
                    '"' => quoted = !quoted,
                    '}' if !quoted => {
                        end = open + i;
                        break;
                    }
                    _ => {}
                }
            }
            end
        }
        None => 0,
    };
    match line[after_labels..].find(" # ") {
        Some(at) => &line[..after_labels + at],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_header_chooses_and_a_tie_or_nothing_gets_the_classic_format() {
        // what Prometheus 2.x sends
        let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(wants_openmetrics(Some("application/openmetrics-text")));
        for classic in [
            None,
            Some("*/*"),
            Some("text/plain;version=0.0.4"),
            Some("text/plain, application/openmetrics-text"),
            Some("application/openmetrics-text;q=0"),
            Some("application/json"),
        ] {
            assert!(!wants_openmetrics(classic), "{classic:?}");
        }
    }

    #[test]
    fn counters_take_their_samples_name_and_openmetrics_only_lines_go() {
        let om = "# HELP hourglass_jobs Jobs by \\\"state\\\".\n\
                  # TYPE hourglass_jobs gauge\n\
                  hourglass_jobs{topic=\"a # b\",state=\"ready\"} 3\n\
                  # HELP hourglass_enqueued Jobs enqueued.\n\
                  # TYPE hourglass_enqueued counter\n\
                  # UNIT hourglass_enqueued jobs\n\
                  hourglass_enqueued_total{topic=\"a\"} 7 # {trace_id=\"x\"} 1.0\n\
                  hourglass_enqueued_created{topic=\"a\"} 1700000000.0\n\
                  # TYPE odd unknown\n\
                  odd 1\n\
                  # EOF\n";
        assert_eq!(
            classic(om),
            "# HELP hourglass_jobs Jobs by \"state\".\n\
             # TYPE hourglass_jobs gauge\n\
             hourglass_jobs{topic=\"a # b\",state=\"ready\"} 3\n\
             # HELP hourglass_enqueued_total Jobs enqueued.\n\
             # TYPE hourglass_enqueued_total counter\n\
             hourglass_enqueued_total{topic=\"a\"} 7\n\
             # TYPE odd untyped\n\
             odd 1\n"
        );
    }
}
