//! The dashboard: one page, a script and a stylesheet, embedded in the
//! binary (no CDN, no build step). The page holds no data: its script reads
//! the JSON API, with the token the operator pastes in (kept in the browser's
//! localStorage) when the server needs one.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use super::App;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/dashboard.js");
const STYLE: &str = include_str!("assets/dashboard.css");
const FLOW: &str = include_str!("assets/flow.js");
const KEYS: &str = include_str!("assets/keys.js");

/// The page's files: served to anyone (they carry no data).
pub(super) fn is_asset(path: &str) -> bool {
    matches!(
        path,
        "/" | "/dashboard.js" | "/flow.js" | "/keys.js" | "/dashboard.css"
    )
}

pub(super) fn routes() -> Router<std::sync::Arc<App>> {
    Router::new()
        .route("/", get(index))
        .route("/dashboard.js", get(script))
        .route("/flow.js", get(flow_script))
        .route("/keys.js", get(keys_script))
        .route("/dashboard.css", get(style))
}

async fn index() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX)
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
}

async fn flow_script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        FLOW,
    )
}

async fn keys_script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        KEYS,
    )
}

async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE)
}
