//! A real headless Chromium, driven over WebDriver: the test starts Debian's
//! `chromedriver` on a free port, opens a fresh profile, and stops both on
//! drop. Missing chromium or chromedriver is a failure that says how to
//! install them, never a skip.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

/// Where Debian's packages put them.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver and the browser session it drives.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Start chromedriver and a headless chromium session.
    pub async fn start() -> Browser {
        for tool in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(tool).exists(),
                "{tool} is missing: the dashboard test needs Debian's chromium and chromium-driver \
                 (apt-get install chromium chromium-driver; scripts/setup does it)"
            );
        }
        let port = crate::free_port();
        // its own process group: chromium and its helpers join it, and drop
        // stops them all, even when a test panics before `close`
        let mut driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("starting chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().unwrap();
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1400,1000",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => break c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    let _ = driver.kill();
                    panic!("chromedriver on {url} did not start a session: {e}");
                }
            }
        };
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }
}

impl Browser {
    /// End the session (closing chromium), then stop chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // the whole group: chromedriver, chromium and chromium's helpers
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Click what `css` finds; find it again if the page redraws it between
/// the finding and the click (a stale element), for up to 30 s.
pub async fn click(c: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let tried = match c.find(fantoccini::Locator::Css(css)).await {
            Ok(element) => element.click().await.map(|_| ()),
            Err(e) => Err(e),
        };
        match tried {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("{css}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
