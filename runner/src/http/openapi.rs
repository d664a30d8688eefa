//! The API's OpenAPI 3.1 description: the paths come from the handlers'
//! `#[utoipa::path]` as the router registers them (`mod.rs`: one
//! registration makes both the route and its description), the request
//! bodies from the types the handlers parse, and the answers from the
//! schemas below. Served at `/api/openapi.json` (no token needed) and
//! committed as `docs/openapi.json`, which a test keeps equal.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, IntoResponses, Modify, OpenApi, ToSchema};

/// The description's frame: what no handler says.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "hourglass",
        description = "Enqueue, follow and operate the jobs of an hourglass job runner. Bodies and \
            answers are JSON; a refusal is `{\"error\", \"field\"}` with a 4xx naming the field at \
            fault; while Redis is unreachable a call answers 503 with `Retry-After: 1` and changes \
            nothing.",
        license(name = "Apache-2.0")
    ),
    servers((url = "/api", description = "this runner's `[http] listen`")),
    security(("token" = [])),
    components(schemas(ErrorBody)),
    modifiers(&Token)
)]
pub(super) struct ApiDoc;

/// The bearer token of `[http] token` (none configured: loopback only, open).
struct Token;

impl Modify for Token {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`[http] token` of queues.toml: every change needs it, reads too unless \
                         `public_read`; `[http] read_token` reads (GET) and is refused any \
                         change (403)",
                    ))
                    .build(),
            ),
        );
    }
}

/// Every refusal.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(super) struct ErrorBody {
    /// What is wrong, for a person.
    error: String,
    /// The field at fault (`delay`, `[3].max_attempts`, `limit`), when one is.
    field: Option<String>,
}

/// One job's answer (a duplicate or a replace), many jobs' answers, or
/// (with `wait`) the job's end: the description's union of what
/// `enqueue` answers with 200.
#[derive(ToSchema, serde::Serialize)]
#[serde(untagged)]
#[allow(dead_code)]
pub(super) enum EnqueuedAny {
    One(super::views::EnqueuedOne),
    Many(super::views::EnqueuedMany),
    Ended(super::answers::EndedNow),
}

/// 400: bad input; `field` names it.
#[derive(IntoResponses)]
#[response(status = 400)]
#[allow(dead_code)]
pub(super) struct BadInput(ErrorBody);

/// 403: the read-only token, on a change.
#[derive(IntoResponses)]
#[response(status = 403)]
#[allow(dead_code)]
pub(super) struct ReadOnly(ErrorBody);

/// 401: no token, or a wrong one.
#[derive(IntoResponses)]
#[response(status = 401)]
#[allow(dead_code)]
pub(super) struct NoToken(ErrorBody);

/// 404: no such topic, job or flow.
#[derive(IntoResponses)]
#[response(status = 404)]
#[allow(dead_code)]
pub(super) struct NotFound(ErrorBody);

/// 409: not in a state that allows it.
#[derive(IntoResponses)]
#[response(status = 409)]
#[allow(dead_code)]
pub(super) struct Conflict(ErrorBody);

/// 503: Redis is unreachable: nothing was changed; retry (`Retry-After: 1`).
#[derive(IntoResponses)]
#[response(status = 503)]
#[allow(dead_code)]
pub(super) struct Unavailable(ErrorBody);

/// The path of a topic's routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(super) struct TopicPath {
    /// the topic's name
    #[param(example = "echo")]
    topic: String,
}

/// The path of one job's routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(super) struct JobPath {
    /// the topic's name
    #[param(example = "echo")]
    topic: String,
    /// the job's id, percent-encoded as one path segment: a flow job's
    /// `FLOW/NAME` is `FLOW%2FNAME`
    #[param(example = "dia-1%2FD")]
    id: String,
}
