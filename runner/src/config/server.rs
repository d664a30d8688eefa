//! The `[http]` section: where this process serves the dashboard, the API
//! and `/metrics` (what its handlers may call out to is `outbound.rs`).

use std::ops::Range;

use super::place::{Invalid, expand_env};
use super::raw::Http;

/// The `[http]` section: where the API, dashboard and `/metrics` are served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpServer {
    /// The address to bind (restart-only).
    pub listen: std::net::SocketAddr,
    /// The operator's bearer token: every change needs it (reads too, unless
    /// `public_read` or the read-only token).
    pub token: Option<Token>,
    /// `read_token`: a bearer token that may read (GET) and change nothing:
    /// for watching (a wall screen, a team's console, a dashboard scraper).
    pub read_token: Option<Token>,
    /// Reads (GET) need no token; changes still do.
    pub public_read: bool,
}

/// A secret that never appears in `Debug` output (and so in no log).
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wrap `secret`.
    pub fn new(secret: String) -> Token {
        Token(secret)
    }

    /// The secret itself, for comparing.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// `[http]` as written, checked.
impl Http {
    /// Validate: an address to bind, a token that is set, and no open
    /// (tokenless) server beyond loopback.
    pub fn resolve(self, whole: Range<usize>) -> Result<HttpServer, Invalid> {
        let span = self.listen.span();
        let listen: std::net::SocketAddr = self.listen.get_ref().parse().map_err(|_| {
            (
                span.clone(),
                format!(
                    "field `listen`: {:?} is not an address and port, e.g. \"127.0.0.1:9090\"",
                    self.listen.get_ref()
                ),
            )
        })?;
        let secret = |t: Option<toml::Spanned<String>>, field: &str| -> Result<_, Invalid> {
            let Some(t) = t else { return Ok(None) };
            let span = t.span();
            let value = expand_env(t.get_ref())
                .map_err(|m| (span.clone(), format!("field `{field}`: {m}")))?;
            if value.len() < 16 {
                return Err((
                    span,
                    format!(
                        "field `{field}`: at least 16 characters (e.g. `openssl rand -hex 32`)"
                    ),
                ));
            }
            Ok(Some((Token::new(value), span)))
        };
        let token = secret(self.token, "token")?.map(|(t, _)| t);
        let read_token = match secret(self.read_token, "read_token")? {
            None => None,
            Some((_, span)) if token.is_none() => {
                return Err((
                    span,
                    "field `read_token`: only means something with a `token` (without one everything is open on loopback)".into(),
                ));
            }
            Some((read, span)) if Some(&read) == token.as_ref() => {
                return Err((
                    span,
                    "field `read_token`: the same as `token`: it would change things too; give it a secret of its own".into(),
                ));
            }
            Some((read, _)) => Some(read),
        };
        if token.is_none() && !listen.ip().is_loopback() {
            return Err((
                span,
                format!(
                    "field `listen`: {listen} is reachable beyond this machine; set `token` (e.g. token = \"${{HOURGLASS_TOKEN}}\") or listen on 127.0.0.1"
                ),
            ));
        }
        if token.is_none() && self.public_read {
            return Err((
                whole,
                "field `public_read`: only means something with a `token` (without one everything is open on loopback)".into(),
            ));
        }
        Ok(HttpServer {
            listen,
            token,
            read_token,
            public_read: self.public_read,
        })
    }
}
