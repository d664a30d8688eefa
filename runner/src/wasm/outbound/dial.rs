//! Sending one request that the grants let through: resolve the name (the
//! SSRF rule decides which addresses may be dialled), connect, TLS for https
//! (system roots plus the topic's CA), hand it to hyper, and cap the
//! response body.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, WasiBody};

use super::{Call, Sent, Traffic, refuse};
use crate::config::{Access, Grants, RemoteHost, Target};

/// Connect (see [`connect`]) and exchange (see [`exchange`]).
pub(super) async fn send(
    call: &Call,
    request: http::Request<WasiBody>,
    target: Target,
    access: Access,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    permit: OwnedSemaphorePermit,
) -> Sent {
    match connect(call, &target, access, connect_timeout).await {
        Ok(stream) => exchange(call, request, stream, first_byte_timeout, permit).await,
        Err(e) => refuse(request, e).await,
    }
}

/// Resolve (checking the SSRF rule), open TCP, and TLS for https.
async fn connect(
    call: &Call,
    target: &Target,
    access: Access,
    connect_timeout: Duration,
) -> Result<Box<dyn Stream>, Error> {
    let connecting = async {
        let addrs = resolve(call, target, access).await?;
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = Some(e),
            }
        }
        Err(Error::Connect(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
        })))
    };
    let tcp = tokio::time::timeout(connect_timeout, connecting)
        .await
        .map_err(|_| Error::ConnectionTimeout)??;
    let _ = tcp.set_nodelay(true);
    Ok(match target.scheme {
        crate::config::Scheme::Http => Box::new(tcp),
        crate::config::Scheme::Https => {
            let tls = call.policy.tls().map_err(|why| {
                tracing::warn!(topic = %call.ctx.topic, "outbound TLS is not available: {why}");
                Error::TlsCertificateError
            })?;
            let name = match &target.host {
                RemoteHost::Ip(ip) => rustls::pki_types::ServerName::from(*ip),
                RemoteHost::Name(name) => rustls::pki_types::ServerName::try_from(name.clone())
                    .map_err(|_| Error::HttpRequestUriInvalid)?,
            };
            let connector = tokio_rustls::TlsConnector::from(tls);
            let stream = tokio::time::timeout(connect_timeout, connector.connect(name, tcp))
                .await
                .map_err(|_| Error::ConnectionTimeout)?
                .map_err(Error::Tls)?;
            Box::new(stream)
        }
    })
}

/// Hand the request to hyper on `stream`, and hand back the response with
/// its body capped and a future that drives the connection to its end.
async fn exchange(
    call: &Call,
    request: http::Request<WasiBody>,
    stream: Box<dyn Stream>,
    first_byte_timeout: Duration,
    permit: OwnedSemaphorePermit,
) -> Sent {
    let limits = &call.policy.limits;
    Traffic::add(&call.traffic.requests, 1);
    // the body the guest writes, counted as it goes out
    let traffic = call.traffic.clone();
    let mut request = request.map(|body| {
        body.map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                Traffic::add(&traffic.bytes_out, data.len() as u64);
            }
            frame
        })
        .boxed_unsync()
    });
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Hyper)?;
    // on the wire the request line carries only the path (no proxy here)
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(path)
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;

    // drive the connection while waiting for the response head
    let mut conn = Some(Box::pin(conn));
    let response = {
        let waiting = tokio::time::timeout(first_byte_timeout, sender.send_request(request));
        tokio::pin!(waiting);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = waiting.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            if let Some(c) = conn.as_mut()
                && let Poll::Ready(r) = c.as_mut().poll(cx)
            {
                conn = None;
                if let Err(e) = r {
                    return Poll::Ready(Ok(Err(e)));
                }
            }
            Poll::Pending
        })
        .await
        .map_err(|_| Error::ConnectionReadTimeout)?
        .map_err(Error::Hyper)?
    };
    drop(sender);
    if let Some(length) = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        && length > limits.max_response
    {
        return Err(Error::HttpResponseBodySize(Some(length)));
    }
    let cap = limits.max_response;
    let response = response.map(|body| {
        Capped {
            body,
            left: cap,
            cap,
            traffic: call.traffic.clone(),
        }
        .boxed_unsync()
    });
    let io = async move {
        // the permit is held until the connection is done with
        let _permit = permit;
        match conn {
            Some(conn) => conn.await.map_err(Error::Hyper),
            None => Ok(()),
        }
    };
    Ok((response, Box::new(io)))
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

/// The addresses to connect to: an IP literal as it is; a name resolved,
/// keeping (for a wildcard grant) only public or explicitly granted addresses.
async fn resolve(call: &Call, target: &Target, access: Access) -> Result<Vec<SocketAddr>, Error> {
    let name = match &target.host {
        RemoteHost::Ip(ip) => return Ok(vec![SocketAddr::new(*ip, target.port)]),
        RemoteHost::Name(name) => name,
    };
    let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), target.port))
        .await
        .map_err(|e| Error::DnsError {
            rcode: Some(e.to_string()),
            info_code: None,
        })?
        .collect();
    if found.is_empty() {
        return Err(Error::DestinationNotFound);
    }
    let allowed = permitted(&call.policy.grants, target, access, &found);
    if allowed.is_empty() {
        call.refuse(&format!(
            "{name} resolves to {}, which is not a public address: grant the name exactly, or the address itself, to allow it (SSRF rule)",
            found[0].ip()
        ));
        return Err(Error::HttpRequestDenied);
    }
    Ok(allowed)
}

/// The SSRF rule: of the addresses a name resolved to, those a request may
/// dial. An exact grant of the name allows them all; a wildcard grant only
/// public ones, and those granted as addresses themselves.
fn permitted(
    grants: &Grants,
    target: &Target,
    access: Access,
    found: &[SocketAddr],
) -> Vec<SocketAddr> {
    found
        .iter()
        .copied()
        .filter(|a| match access {
            Access::Explicit => true,
            Access::Wildcard => is_public(a.ip()) || grants.grants_address(target, a.ip()),
            Access::Denied => false,
        })
        .collect()
}

/// Whether `ip` is a globally routable unicast address: not loopback,
/// private, link-local, shared (CGNAT), unspecified, multicast, broadcast,
/// documentation or reserved; IPv6 forms of IPv4 addresses are judged as those.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
                || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
                || (a == 198 && (b == 18 || b == 19)) // benchmarking
                || a >= 240) // reserved
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b {
                // NAT64: the IPv4 address is the last 32 bits
                let [.., c, d] = s;
                let v4 = std::net::Ipv4Addr::new((c >> 8) as u8, c as u8, (d >> 8) as u8, d as u8);
                return is_public(IpAddr::V4(v4));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || s[..6].iter().all(|&x| x == 0)) // IPv4-compatible and other ::/96
        }
    }
}

/// System roots plus the topic's extra CA, HTTP/1.1 only.
pub(super) fn client_config(
    extra_ca: Option<&std::path::Path>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(system_roots().iter().cloned());
    if let Some(path) = extra_ca {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("{} holds no usable CA certificate", path.display()));
        }
    }
    if roots.is_empty() {
        return Err(
            "no trusted root certificates: the system has none and no http.tls_ca is set".into(),
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The system's trust roots, read once per process.
fn system_roots() -> &'static [rustls::pki_types::CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<rustls::pki_types::CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        if found.certs.is_empty() {
            tracing::warn!(errors = ?found.errors, "no system trust roots found: outbound HTTPS trusts only a topic's http.tls_ca");
        }
        found.certs
    })
}

/// A response body that fails once more than `cap` bytes arrive.
struct Capped {
    body: Incoming,
    left: u64,
    cap: u64,
    /// Where the bytes that arrive are counted.
    traffic: Arc<Traffic>,
}

impl Body for Capped {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        Poll::Ready(match frame {
            None => None,
            Some(Err(e)) => Some(Err(Error::Hyper(e))),
            Some(Ok(frame)) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                if len > self.left {
                    // how much arrived, which is past the cap
                    let seen = self.cap - self.left + len;
                    Some(Err(Error::HttpResponseBodySize(Some(seen))))
                } else {
                    self.left -= len;
                    Traffic::add(&self.traffic.bytes_in, len);
                    Some(Ok(frame))
                }
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(list: &[&str]) -> Grants {
        Grants::http_only(list)
    }

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter()
            .map(|a| SocketAddr::new(a.parse().unwrap(), 443))
            .collect()
    }

    #[test]
    fn a_wildcard_grant_never_dials_a_private_address_unless_it_is_granted() {
        let target = Target::parse("https", "db.corp.example.com").unwrap();
        let g = grants(&["https://*.corp.example.com"]);
        let access = g.http_access(&target);
        assert_eq!(access, Access::Wildcard);
        for private in ["127.0.0.1", "10.0.0.5", "169.254.169.254", "::1", "fd00::1"] {
            assert!(
                permitted(&g, &target, access, &addrs(&[private])).is_empty(),
                "{private}"
            );
        }
        // a mixed answer keeps only the public address (no rebinding to the private one)
        let mixed = addrs(&["10.0.0.5", "93.184.216.34"]);
        assert_eq!(
            permitted(&g, &target, access, &mixed),
            addrs(&["93.184.216.34"])
        );
        // the address granted itself (same scheme and port) is allowed
        let g = grants(&["https://*.corp.example.com", "https://10.0.0.5"]);
        assert_eq!(permitted(&g, &target, access, &mixed), mixed);
    }

    #[test]
    fn an_exact_grant_of_the_name_may_be_private() {
        let target = Target::parse("https", "orders.internal").unwrap();
        let g = grants(&["https://orders.internal"]);
        let access = g.http_access(&target);
        assert_eq!(access, Access::Explicit);
        let found = addrs(&["10.1.2.3", "127.0.0.1"]);
        assert_eq!(permitted(&g, &target, access, &found), found);
    }

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2001:db8::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }
}
