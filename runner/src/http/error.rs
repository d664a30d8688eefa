//! Every error the API answers: JSON `{"error": "...", "field": "..."}` with a
//! 4xx for bad requests, and 503 with `Retry-After` while Redis is away.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::redis::QueueError;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    field: Option<String>,
    retry_after: Option<u64>,
}

impl ApiError {
    /// `status` with `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// `status` because of `field` of the request.
    pub fn field(
        status: StatusCode,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ApiError {
        let field = field.into();
        ApiError {
            status,
            message: format!("{field}: {}", message.into()),
            field: Some(field),
            retry_after: None,
        }
    }
}

impl From<QueueError> for ApiError {
    fn from(e: QueueError) -> ApiError {
        match e {
            QueueError::Invalid(why) => ApiError::new(StatusCode::BAD_REQUEST, why),
            QueueError::Exists(why) => ApiError::new(StatusCode::CONFLICT, why),
            e if e.is_retryable() => ApiError {
                retry_after: Some(1),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("redis is unavailable, nothing was changed; retry shortly ({e})"),
                )
            },
            e => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        // axum names the failing field's path (via serde_path_to_error)
        let text = r.body_text();
        let text = text
            .strip_prefix("Failed to deserialize the JSON body into the target type: ")
            .unwrap_or(&text);
        let field = text
            .split_once(": ")
            .map(|(path, _)| path)
            .filter(|p| !p.contains(' '))
            .map(str::to_owned);
        ApiError {
            status: match r.status() {
                StatusCode::UNSUPPORTED_MEDIA_TYPE => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
                _ => StatusCode::BAD_REQUEST,
            },
            message: format!("body: {text}"),
            field,
            retry_after: None,
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        let text = r.body_text();
        let text = text
            .strip_prefix("Failed to deserialize query string: ")
            .unwrap_or(&text)
            .to_owned();
        let field = text.split_once(": ").map(|(f, _)| f.to_owned());
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!("query: {text}"),
            field,
            retry_after: None,
        }
    }
}

impl ApiError {
    /// What is wrong, for a person (as the answer's `error` says it).
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({ "error": self.message });
        if let Some(field) = self.field {
            body["field"] = field.into();
        }
        if let Some(secs) = self.retry_after {
            body["retry_after_s"] = secs.into();
        }
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
