//! The console: one page, its scripts and stylesheet, and the two vendored
//! libraries (uPlot for the charts, dagre for the flow graph; fetched from
//! npm by `scripts/vendor-console`, versions and licenses in
//! `assets/vendor/`), all embedded in the binary: no CDN, no build step, no
//! request outside the runner. The page holds no data: its scripts read the
//! JSON API, with the token the operator pastes in (kept in the browser's
//! localStorage) when the server needs one.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use super::App;

const INDEX: &str = include_str!("assets/index.html");

/// Every file but the page: its path under `/` and its text.
const FILES: &[(&str, &str)] = &[
    ("console.css", include_str!("assets/console.css")),
    ("core.js", include_str!("assets/core.js")),
    ("charts.js", include_str!("assets/charts.js")),
    ("topics.js", include_str!("assets/topics.js")),
    ("browse.js", include_str!("assets/browse.js")),
    ("job.js", include_str!("assets/job.js")),
    ("journal.js", include_str!("assets/journal.js")),
    ("flow.js", include_str!("assets/flow.js")),
    ("keys.js", include_str!("assets/keys.js")),
    ("rollouts.js", include_str!("assets/rollouts.js")),
    ("cron.js", include_str!("assets/cron.js")),
    ("runners.js", include_str!("assets/runners.js")),
    ("app.js", include_str!("assets/app.js")),
    (
        "vendor/uplot.min.js",
        include_str!("assets/vendor/uplot.min.js"),
    ),
    (
        "vendor/uplot.min.css",
        include_str!("assets/vendor/uplot.min.css"),
    ),
    (
        "vendor/dagre.min.js",
        include_str!("assets/vendor/dagre.min.js"),
    ),
    ("vendor/VERSIONS", include_str!("assets/vendor/VERSIONS")),
    (
        "vendor/LICENSE-uplot",
        include_str!("assets/vendor/LICENSE-uplot"),
    ),
    (
        "vendor/LICENSE-dagre",
        include_str!("assets/vendor/LICENSE-dagre"),
    ),
];

fn file(path: &str) -> Option<&'static str> {
    FILES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, text)| *text)
}

/// The page's files: served to anyone (they carry no data).
pub(super) fn is_asset(path: &str) -> bool {
    path == "/" || path.strip_prefix('/').is_some_and(|p| file(p).is_some())
}

pub(super) fn routes() -> Router<std::sync::Arc<App>> {
    // one route a file: a catch-all here would answer the API's unknown
    // paths before its own fallback
    FILES.iter().fold(
        Router::new().route("/", get(index)),
        |router, (path, text)| {
            let kind = match path.rsplit_once('.').map(|(_, ext)| ext) {
                Some("js") => "text/javascript; charset=utf-8",
                Some("css") => "text/css; charset=utf-8",
                _ => "text/plain; charset=utf-8",
            };
            router.route(
                &format!("/{path}"),
                get(move || async move { ([(header::CONTENT_TYPE, kind)], *text) }),
            )
        },
    )
}

async fn index() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX)
}
