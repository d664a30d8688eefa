//! A loopback HTTP endpoint for the outbound-call workload: answers every
//! request `200 ok` and closes, as fast as tokio lets it. Stops on drop.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";

/// The endpoint, serving until dropped.
pub struct Sink {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Sink {
    pub async fn start() -> anyhow::Result<Sink> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut seen = Vec::with_capacity(512);
                    let mut buf = [0u8; 1024];
                    // a GET has no body: the head ends the request
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = conn.write_all(ANSWER).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Ok(Sink { addr, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
