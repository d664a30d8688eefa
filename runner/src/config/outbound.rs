//! Outbound HTTP in `queues.toml`: the hosts a topic's handler may call
//! (`grants = { http = [...] }`) and the limits on each call (`http = {...}`).
//!
//! A grant is `scheme://host[:port]`: scheme `http` or `https`; host an exact
//! name, a name with one leading wildcard label (`*.example.com` matches
//! `a.example.com`, not `example.com` and not `a.b.example.com`), an IPv4
//! address or a bracketed IPv6 address; the port defaults to the scheme's
//! (80, 443), and a grant opens that one port only. Matching is pure: which
//! addresses a name may resolve to (the SSRF rule) is decided where the
//! request is sent, with [`Grants::http_access`] and [`Grants::grants_address`].

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::Grants;

/// Limits on every outbound request of one topic's attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// Time to resolve the name and open the connection (TLS included).
    pub connect_timeout: Duration,
    /// Time from sending the request to the response's first byte.
    pub first_byte_timeout: Duration,
    /// The largest response body a handler may read, in bytes.
    pub max_response: u64,
    /// Requests one attempt may have open at once.
    pub max_concurrent: u32,
    /// A PEM file of extra CAs trusted besides the system's roots.
    pub tls_ca: Option<PathBuf>,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: Duration::from_secs(30),
            max_response: 8 << 20,
            max_concurrent: 8,
            tls_ca: None,
        }
    }
}

/// The largest `max_response` a topic may set.
pub const MAX_RESPONSE: u64 = 1 << 30;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    fn parse(text: &str) -> Option<Scheme> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }

    /// 80 or 443.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The host part of a grant or a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RemoteHost {
    /// A DNS name, lowercase, without a trailing dot.
    Name(String),
    /// An IP address literal.
    Ip(IpAddr),
}

impl fmt::Display for RemoteHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteHost::Name(name) => f.write_str(name),
            RemoteHost::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            RemoteHost::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Where one outbound request goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// The scheme.
    pub scheme: Scheme,
    /// The host.
    pub host: RemoteHost,
    /// The port (the scheme's when the request names none).
    pub port: u16,
}

impl Target {
    /// The target of a request to `scheme://authority`.
    pub fn parse(scheme: &str, authority: &str) -> Result<Target, String> {
        let scheme = Scheme::parse(scheme)
            .ok_or_else(|| format!("scheme {scheme:?} is not http or https"))?;
        let (host, port) = split_authority(authority)?;
        Ok(Target {
            scheme,
            host: parse_host(host)?,
            port: port.unwrap_or(scheme.default_port()),
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port)
    }
}

/// A grant's host: exact, or every name one label below a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact(RemoteHost),
    /// `*.suffix`: the suffix without the `*.`.
    Wildcard(String),
}

/// One entry of `grants.http`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    scheme: Scheme,
    host: Pattern,
    port: u16,
}

impl HttpGrant {
    /// Parse `scheme://host[:port]` (a trailing `/` is allowed, nothing else after the port).
    pub fn parse(text: &str) -> Result<HttpGrant, String> {
        let hint = "write scheme://host[:port], e.g. \"https://api.example.com\", \"http://127.0.0.1:8080\" or \"https://*.example.com\"";
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("{text:?} has no scheme; {hint}"))?;
        let scheme = Scheme::parse(scheme)
            .ok_or_else(|| format!("{text:?}: the scheme must be http or https"))?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(format!(
                "{text:?}: a grant names a scheme, a host and a port, not a path or query; {hint}"
            ));
        }
        if authority.contains('@') {
            return Err(format!(
                "{text:?}: a grant cannot carry a user or password; {hint}"
            ));
        }
        let (host, port) = split_authority(authority).map_err(|e| format!("{text:?}: {e}"))?;
        let host = match host.strip_prefix("*.") {
            Some(suffix) => {
                let suffix = match parse_host(suffix).map_err(|e| format!("{text:?}: {e}"))? {
                    RemoteHost::Name(name) if name.contains('.') => name,
                    _ => {
                        return Err(format!(
                            "{text:?}: a wildcard stands for one label in front of a domain of at least two labels, e.g. \"*.example.com\""
                        ));
                    }
                };
                Pattern::Wildcard(suffix)
            }
            None if host.contains('*') => {
                return Err(format!(
                    "{text:?}: only one leading wildcard label is allowed, e.g. \"https://*.example.com\""
                ));
            }
            None => Pattern::Exact(parse_host(host).map_err(|e| format!("{text:?}: {e}"))?),
        };
        Ok(HttpGrant {
            scheme,
            host,
            port: port.unwrap_or(scheme.default_port()),
        })
    }

    /// Whether this grant opens `target`, and whether it names it exactly.
    fn access(&self, target: &Target) -> Access {
        if self.scheme != target.scheme || self.port != target.port {
            return Access::Denied;
        }
        match (&self.host, &target.host) {
            (Pattern::Exact(host), wanted) if host == wanted => Access::Explicit,
            (Pattern::Wildcard(suffix), RemoteHost::Name(name)) => {
                match name.strip_suffix(suffix.as_str()) {
                    Some(label)
                        if label.len() > 1
                            && label.ends_with('.')
                            && !label[..label.len() - 1].contains('.') =>
                    {
                        Access::Wildcard
                    }
                    _ => Access::Denied,
                }
            }
            _ => Access::Denied,
        }
    }
}

impl fmt::Display for HttpGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Pattern::Exact(host) => write!(f, "{}://{host}:{}", self.scheme.as_str(), self.port),
            Pattern::Wildcard(suffix) => {
                write!(f, "{}://*.{suffix}:{}", self.scheme.as_str(), self.port)
            }
        }
    }
}

/// How a topic's grants treat one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No grant opens it: refused before anything leaves the process.
    Denied,
    /// A grant names this host (or address) exactly: any address it resolves to may be used.
    Explicit,
    /// Only a wildcard grant covers it: public addresses only, unless an
    /// address is granted itself.
    Wildcard,
}

impl Grants {
    /// Whether (and how) the grants let a request go to `target`.
    pub fn http_access(&self, target: &Target) -> Access {
        self.http
            .iter()
            .map(|g| g.access(target))
            .max_by_key(|a| match a {
                Access::Denied => 0,
                Access::Wildcard => 1,
                Access::Explicit => 2,
            })
            .unwrap_or(Access::Denied)
    }

    /// Whether `ip` itself is granted for the scheme and port of `target`
    /// (what lets a wildcard-matched name resolve to a private address).
    pub fn grants_address(&self, target: &Target, ip: IpAddr) -> bool {
        let literal = Target {
            host: RemoteHost::Ip(ip),
            ..target.clone()
        };
        self.http
            .iter()
            .any(|g| g.access(&literal) == Access::Explicit)
    }
}

/// Split `host[:port]` / `[v6][:port]`.
fn split_authority(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest
            .split_once(']')
            .ok_or_else(|| "an IPv6 address needs its closing ']'".to_owned())?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("unexpected {after:?} after the IPv6 address"))?,
            ),
        };
        (&authority[..v6.len() + 2], port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(format!("port {p:?} is not a number from 1 to 65535")),
            Ok(n) => Some(n),
        },
    };
    if host.is_empty() {
        return Err("the host is missing".into());
    }
    Ok((host, port))
}

/// A name (lowercased, trailing dot dropped) or an IP literal (`[..]` for IPv6).
fn parse_host(host: &str) -> Result<RemoteHost, String> {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6
            .parse()
            .map(RemoteHost::Ip)
            .map_err(|_| format!("{host:?} is not an IPv6 address"));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(RemoteHost::Ip(ip));
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!("{host:?} is not a host name or IP address"));
    }
    Ok(RemoteHost::Name(name))
}

#[cfg(test)]
impl Grants {
    /// Grants of these `grants.http` entries and nothing else.
    pub(crate) fn http_only(list: &[&str]) -> Grants {
        Grants {
            http: list.iter().map(|g| HttpGrant::parse(g).unwrap()).collect(),
            ..Grants::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(list: &[&str]) -> Grants {
        Grants::http_only(list)
    }

    fn access(list: &[&str], scheme: &str, authority: &str) -> Access {
        grants(list).http_access(&Target::parse(scheme, authority).unwrap())
    }

    #[test]
    fn a_grant_opens_its_own_port_only() {
        let g = ["http://127.0.0.1:8080"];
        assert_eq!(access(&g, "http", "127.0.0.1:8080"), Access::Explicit);
        assert_eq!(access(&g, "http", "127.0.0.1:8081"), Access::Denied);
        assert_eq!(access(&g, "http", "127.0.0.1"), Access::Denied);
        assert_eq!(access(&g, "https", "127.0.0.1:8080"), Access::Denied);
        let g = ["https://api.example.com"];
        assert_eq!(access(&g, "https", "api.example.com"), Access::Explicit);
        assert_eq!(
            access(&g, "https", "API.Example.com.:443"),
            Access::Explicit
        );
        assert_eq!(access(&g, "https", "api.example.com:8443"), Access::Denied);
        assert_eq!(access(&g, "http", "api.example.com"), Access::Denied);
    }

    #[test]
    fn a_wildcard_is_one_label_and_not_the_bare_domain() {
        let g = ["https://*.payments.example.com"];
        assert_eq!(
            access(&g, "https", "eu.payments.example.com"),
            Access::Wildcard
        );
        assert_eq!(access(&g, "https", "payments.example.com"), Access::Denied);
        assert_eq!(
            access(&g, "https", "a.eu.payments.example.com"),
            Access::Denied
        );
        assert_eq!(
            access(&g, "https", "evilpayments.example.com"),
            Access::Denied
        );
        let both = [
            "https://*.payments.example.com",
            "https://payments.example.com",
        ];
        assert_eq!(
            access(&both, "https", "payments.example.com"),
            Access::Explicit
        );
    }

    #[test]
    fn nothing_granted_denies_everything() {
        assert_eq!(access(&[], "https", "example.com"), Access::Denied);
    }

    #[test]
    fn ipv6_literals_and_granted_addresses() {
        let g = grants(&["http://[::1]:9000", "https://*.corp.example.com"]);
        let v6 = Target::parse("http", "[::1]:9000").unwrap();
        assert_eq!(g.http_access(&v6), Access::Explicit);
        let corp = Target::parse("https", "db.corp.example.com").unwrap();
        assert!(!g.grants_address(&corp, "10.0.0.5".parse().unwrap()));
        let g = grants(&["https://*.corp.example.com", "https://10.0.0.5"]);
        assert!(g.grants_address(&corp, "10.0.0.5".parse().unwrap()));
    }

    #[test]
    fn malformed_grants_say_what_is_wrong() {
        for (bad, says) in [
            ("api.example.com", "no scheme"),
            ("ftp://example.com", "http or https"),
            ("https://example.com/path", "not a path"),
            ("https://u:p@example.com", "user or password"),
            ("https://example.com:0", "1 to 65535"),
            ("https://example.com:http", "1 to 65535"),
            ("https://*.com", "two labels"),
            ("https://a.*.example.com", "one leading wildcard"),
            ("https://exa mple.com", "not a host name"),
            ("https://[::1", "closing"),
            ("https://", "missing"),
        ] {
            let err = HttpGrant::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert_eq!(
            HttpGrant::parse("HTTPS://*.Example.com/")
                .unwrap()
                .to_string(),
            "https://*.example.com:443"
        );
    }
}
