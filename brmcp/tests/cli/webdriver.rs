//! A small WebDriver client over reqwest, driving Debian's `chromium` headless through
//! its `chromedriver`: enough to open a page, wait for text, click and screenshot.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use super::processes::free_port;

/// How long an element may take to show what a test waits for: the pages poll every
/// 1.5 to 2 s; generous for a loaded machine.
const SHOWS_WITHIN: Duration = Duration::from_secs(45);

/// The WebDriver element key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium session.
pub(super) struct Browser {
    http: reqwest::Client,
    base: String,
    _driver: Driver,
}

/// chromedriver in a process group of its own, with the browsers it starts: the whole
/// group is killed when the test ends, however it ends (a failed test has no chance
/// to end its session, and a killed driver leaves its browser running).
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
    }
}

fn which(name: &str) -> Option<String> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !path.is_empty()).then_some(path)
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session, both killed when the
    /// browser is dropped.
    ///
    /// # Panics
    /// When Chromium or its driver is not installed: run scripts/test-deps.
    pub(super) async fn start() -> Self {
        let driver = which("chromedriver")
            .expect("chromedriver not found: run scripts/test-deps (Debian's chromium-driver)");
        let chromium = which("chromium")
            .expect("chromium not found: run scripts/test-deps (Debian's chromium)");
        let port = free_port();
        let driver = Driver(
            Command::new(driver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("spawn chromedriver"),
        );
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http.get(format!("{base}/status")).send().await;
            if let Ok(r) = ready
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == json!(true)
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromedriver never ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1150",
                         "--force-device-scale-factor=1"],
            },
        }}});
        let session: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session json");
        let id = session["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no Chromium session: {session}"));
        Self {
            base: format!("{base}/session/{id}"),
            http,
            _driver: driver,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let v: Value = request
            .send()
            .await
            .expect("webdriver")
            .json()
            .await
            .expect("webdriver json");
        v["value"].clone()
    }

    /// Opens `url`.
    pub(super) async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// The current URL.
    pub(super) async fn url(&self) -> String {
        let v = self.call(reqwest::Method::GET, "/url", None).await;
        v.as_str().unwrap_or_default().to_owned()
    }

    async fn find(&self, css: &str) -> Option<String> {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT].as_str().map(str::to_owned)
    }

    /// The text content of the element `css`, if there is one.
    async fn text(&self, css: &str) -> Option<String> {
        let script = "const e = document.querySelector(arguments[0]); \
                      return e ? e.textContent : null;";
        let v = self
            .call(
                reqwest::Method::POST,
                "/execute/sync",
                Some(json!({"script": script, "args": [css]})),
            )
            .await;
        v.as_str().map(str::to_owned)
    }

    /// What `script` (a function body, in the page's own origin) returns.
    pub(super) async fn script(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// How many elements match `css` now.
    pub(super) async fn count(&self, css: &str) -> usize {
        let v = self
            .call(
                reqwest::Method::POST,
                "/execute/sync",
                Some(json!({
                    "script": "return document.querySelectorAll(arguments[0]).length;",
                    "args": [css],
                })),
            )
            .await;
        v.as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or_default()
    }

    /// Waits until the element `css` shows `text`; returns its whole text.
    pub(super) async fn wait_text(&self, css: &str, text: &str) -> String {
        let deadline = tokio::time::Instant::now() + SHOWS_WITHIN;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            if let Some(shown) = self.text(css).await {
                last = shown;
                if last.contains(text) {
                    return last;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let url = self.url().await;
        let body = self.text("body").await.unwrap_or_default();
        panic!("{css} never showed {text:?}; last: {last:?}; page {url}:\n{body}");
    }

    /// Waits for the element `css`, then clicks it.
    pub(super) async fn click(&self, css: &str) {
        let deadline = tokio::time::Instant::now() + SHOWS_WITHIN;
        let mut last = Value::Null;
        loop {
            if let Some(el) = self.find(css).await {
                let v = self
                    .call(
                        reqwest::Method::POST,
                        &format!("/element/{el}/click"),
                        Some(json!({})),
                    )
                    .await;
                // A page redrawn between the find and the click: find it again.
                if v.get("error").is_none() {
                    return;
                }
                last = v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {css} to click: {last}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Replaces what the input `css` holds with `text`, as typed.
    pub(super) async fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css).await.unwrap_or_else(|| panic!("no {css}"));
        self.call(
            reqwest::Method::POST,
            &format!("/element/{el}/clear"),
            Some(json!({})),
        )
        .await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{el}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// A PNG of the window.
    pub(super) async fn screenshot(&self) -> Vec<u8> {
        let v = self.call(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("screenshot"))
            .expect("base64 png")
    }

    /// Ends the session.
    pub(super) async fn close(self) {
        let _ = self.http.delete(&self.base).send().await;
    }
}
