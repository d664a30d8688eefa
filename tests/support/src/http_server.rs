//! A real HTTP/1.1 server on a loopback port it binds itself (port 0), for
//! the outbound-HTTP tests and the demo: it answers from a script, records
//! every request it gets, and stops on drop. [`HttpServer::start_tls`] serves
//! HTTPS with a certificate from [`crate::tls::write_certificates`].

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One scripted answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A complete response.
    Status {
        /// The status code.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// The body.
        body: Vec<u8>,
    },
    /// Read the request, then never answer (until the server stops).
    Hang,
    /// Wait this many milliseconds, then give the reply.
    Delay(u64, Box<Reply>),
    /// 200 with a body of `bytes` bytes streamed in 64 KiB chunks, with or
    /// without a `content-length` (without it, the body ends at close).
    Stream {
        /// How many bytes.
        bytes: u64,
        /// Whether to declare them up front.
        declare_length: bool,
    },
}

impl Reply {
    /// `status` with a plain-text body.
    pub fn status(status: u16, body: &str) -> Reply {
        Reply::Status {
            status,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    /// Add a header to a [`Reply::Status`].
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Status { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }
}

/// A request as the server received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// When it was read.
    pub at: std::time::Instant,
}

impl Received {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct State {
    /// Answers in order; the last one repeats.
    script: Vec<Reply>,
    next: usize,
    received: Vec<Received>,
    /// Body bytes written by [`Reply::Stream`] answers.
    streamed: u64,
}

/// The server; stops and joins its threads on drop.
pub struct HttpServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    tls: bool,
}

impl HttpServer {
    /// Serve `script` (answers in order, the last repeated) on 127.0.0.1 at a
    /// port the system picks.
    pub fn start(script: Vec<Reply>) -> HttpServer {
        HttpServer::bind("127.0.0.1:0", script).expect("binding a loopback port")
    }

    /// Serve `script` on `addr`.
    pub fn bind(addr: &str, script: Vec<Reply>) -> std::io::Result<HttpServer> {
        HttpServer::serve(addr, script, None)
    }

    /// Serve `script` over HTTPS on 127.0.0.1, with the server certificate
    /// and key in `certs` (`server.crt`, `server.key`, for 127.0.0.1 and localhost).
    pub fn start_tls(script: Vec<Reply>, certs: &std::path::Path) -> HttpServer {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(certs.join("server.crt"))
            .and_then(|c| c.collect::<Result<Vec<_>, _>>())
            .expect("server.crt");
        let key = PrivateKeyDer::from_pem_file(certs.join("server.key")).expect("server.key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("a usable server certificate");
        HttpServer::serve("127.0.0.1:0", script, Some(Arc::new(config)))
            .expect("binding a loopback port")
    }

    fn serve(
        addr: &str,
        script: Vec<Reply>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> std::io::Result<HttpServer> {
        assert!(!script.is_empty(), "a server needs at least one reply");
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            script,
            next: 0,
            received: Vec::new(),
            streamed: 0,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let is_tls = tls.is_some();
        let acceptor = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    // generous: on a loaded machine a client may take seconds
                    // between its request's head and the end of its body
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(60)));
                    let (state, stop, tls) = (state.clone(), stop.clone(), tls.clone());
                    std::thread::spawn(move || match tls {
                        None => {
                            let mut conn = conn;
                            serve(&mut conn, &state, &stop);
                            linger(&mut conn);
                        }
                        Some(config) => {
                            let Ok(session) = rustls::ServerConnection::new(config) else {
                                return;
                            };
                            let mut stream = rustls::StreamOwned::new(session, conn);
                            serve(&mut stream, &state, &stop);
                            stream.conn.send_close_notify();
                            let _ = stream.flush();
                        }
                    });
                }
            })
        };
        Ok(HttpServer {
            addr,
            state,
            stop,
            acceptor: Some(acceptor),
            tls: is_tls,
        })
    }

    /// `http://127.0.0.1:PORT` (`https://localhost:PORT` for a TLS server).
    pub fn url(&self) -> String {
        match self.tls {
            false => format!("http://{}", self.addr),
            true => format!("https://localhost:{}", self.addr.port()),
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// Body bytes the [`Reply::Stream`] answers got written before the client
    /// stopped reading (or all of them).
    pub fn streamed(&self) -> u64 {
        self.state.lock().unwrap().streamed
    }

    /// Replace the script (the answers start again from its first).
    pub fn set_script(&self, script: Vec<Reply>) {
        assert!(!script.is_empty(), "a server needs at least one reply");
        let mut state = self.state.lock().unwrap();
        state.script = script;
        state.next = 0;
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // wake the acceptor
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn serve<S: Read + Write>(conn: &mut S, state: &Mutex<State>, stop: &AtomicBool) {
    let mut reader = BufReader::new(conn);
    let Some(request) = read_request(&mut reader) else {
        return;
    };
    let writer = reader.get_mut();
    let mut reply = {
        let mut s = state.lock().unwrap();
        s.received.push(request);
        let i = s.next.min(s.script.len() - 1);
        s.next += 1;
        s.script[i].clone()
    };
    while let Reply::Delay(ms, then) = reply {
        std::thread::sleep(Duration::from_millis(ms));
        reply = *then;
    }
    match reply {
        Reply::Status {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\nconnection: close\r\n",
                reason(status),
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = writer.write_all(head.as_bytes());
            let _ = writer.write_all(&body);
        }
        Reply::Delay(..) => unreachable!("delays are waited out above"),
        Reply::Hang => {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Reply::Stream {
            bytes,
            declare_length,
        } => {
            let length = if declare_length {
                format!("content-length: {bytes}\r\n")
            } else {
                String::new()
            };
            let head = format!("HTTP/1.1 200 OK\r\n{length}connection: close\r\n\r\n");
            if writer.write_all(head.as_bytes()).is_err() {
                return;
            }
            let chunk = vec![b'x'; 64 << 10];
            let mut left = bytes;
            while left > 0 && !stop.load(Ordering::SeqCst) {
                let n = left.min(chunk.len() as u64) as usize;
                if writer.write_all(&chunk[..n]).is_err() {
                    return; // the client hung up
                }
                left -= n as u64;
                state.lock().unwrap().streamed += n as u64;
            }
        }
    }
    let _ = writer.flush();
}

/// Close as HTTP servers do ("lingering close"): stop writing, then read
/// what the client still sends until it closes too. Closing a socket with
/// unread bytes in it makes the kernel answer with a reset, which the client
/// may see before the response it has not read yet ("connection reset").
fn linger(conn: &mut TcpStream) {
    let _ = conn.shutdown(std::net::Shutdown::Write);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let mut sink = [0; 4096];
    while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
}

fn read_request<S: Read>(reader: &mut BufReader<S>) -> Option<Received> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        let mut body = Vec::new();
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2]; // and its CRLF
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
        body
    } else {
        let length: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        body
    };
    Some(Received {
        method,
        path,
        headers,
        body,
        at: std::time::Instant::now(),
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
