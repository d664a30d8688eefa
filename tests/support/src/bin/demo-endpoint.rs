//! The demo's webhook receiver: answers 503 twice, then 200, on the address
//! given (default 127.0.0.1:8787), until it is stopped. With `shop` after
//! the address it is the demo's shop instead (the durable `checkout`
//! handler's): 200 and a charge id to every request.

use std::time::Duration;

use test_support::{HttpServer, Reply};

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8787".into());
    let script = match std::env::args().nth(2).as_deref() {
        Some("shop") => vec![Reply::status(200, "ch_1042")],
        _ => vec![
            Reply::status(503, "busy, try again"),
            Reply::status(503, "still busy"),
            Reply::status(200, "received, thanks"),
        ],
    };
    let server = HttpServer::bind(&addr, script).unwrap_or_else(|e| {
        eprintln!("demo-endpoint: cannot listen on {addr}: {e}");
        std::process::exit(1)
    });
    println!("demo-endpoint: listening on {}", server.url());
    let mut seen = 0;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let received = server.received();
        for r in &received[seen..] {
            println!(
                "demo-endpoint: {} {} {}",
                r.method,
                r.path,
                String::from_utf8_lossy(&r.body)
            );
        }
        seen = received.len();
    }
}
