//! A headless Chromium for integration tests, driven over the Chrome DevTools Protocol (CDP).
//!
//! [`Browser::open`] starts `chromium --headless=new` on a page with a throwaway profile and a
//! DevTools port the browser picks itself (`--remote-debugging-port=0`, read back from the
//! profile's `DevToolsActivePort` file), then connects a WebSocket to that page's target. Commands
//! are JSON `{id, method, params}` messages; events in between are skipped. Every socket read has
//! a 10 s limit, so a stuck browser fails the test rather than hanging it. Chromium runs in its
//! own process group, which is killed whole when the [`Browser`] is dropped.
//!
//! Without chromium on the `PATH` a test skips, saying so; with `CONTRAI_REQUIRE_SHARED` set (CI)
//! it fails instead.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// Flags for a headless Chromium that runs in containers and as root, without a display or GPU.
const FLAGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars", // a scrollbar would take 15 of a screenshot's 1000 px
    "--remote-debugging-port=0",
];

/// How long chromium may take to start and show its page target.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one DevTools command (or one socket read) may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// A headless Chromium showing one page, driven over the DevTools protocol; killed on drop.
pub struct Browser {
    // Fields drop in this order: the socket closes, chromium dies, then its profile is removed.
    socket: WebSocket<TcpStream>,
    next_id: u64,
    _process: Group,
    _profile: tempfile::TempDir,
}

/// A child leading its own process group: the group is killed, and the child reaped, on drop.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a negative pid signals the group the child leads (process_group(0)).
        unsafe { libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

impl Browser {
    /// Chromium on `url`, or `None` (after saying the test is skipped) when no chromium is installed; with CONTRAI_REQUIRE_SHARED set (CI) a missing chromium panics instead.
    pub fn open(url: &str) -> Option<Browser> {
        let Some(exe) = chromium() else {
            if crate::required() {
                panic!("chromium is not on the PATH and {} is set", crate::REQUIRE_SHARED);
            }
            eprintln!("skipped: chromium is not installed");
            return None;
        };
        Some(Self::start(&exe, url).unwrap_or_else(|e| panic!("starting chromium on {url}: {e}")))
    }

    /// Evaluates a JavaScript expression in the page and returns its value (Runtime.evaluate with returnByValue: true); an exception in the page is an Err with its text.
    pub fn eval(&mut self, expr: &str) -> Result<Value, String> {
        let params = json!({"expression": expr, "returnByValue": true});
        let mut result = self.call("Runtime.evaluate", params)?;
        if let Some(details) = result.get("exceptionDetails") {
            let text = details["exception"]["description"]
                .as_str()
                .or(details["text"].as_str());
            return Err(text.unwrap_or("exception").to_string());
        }
        Ok(result["result"]["value"].take())
    }

    /// Polls `expr` every 100 ms until it is truthy or `timeout` passes; returns the time it took, or Err with the last value.
    pub fn wait_for(&mut self, expr: &str, timeout: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            let last = self.eval(expr);
            if last.as_ref().is_ok_and(truthy) {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= timeout {
                return Err(format!("`{expr}` still {last:?} after {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Writes a PNG screenshot of the whole page (Page.captureScreenshot with captureBeyondViewport: true, after Emulation.setDeviceMetricsOverride to width 1000 and the page's scrollHeight) to `path`.
    pub fn screenshot(&mut self, path: &Path) -> Result<(), String> {
        // Lay the page out 1000 px wide first (height 0: unchanged), then measure its height.
        self.set_size(1000, 0)?;
        let height = self.eval("document.documentElement.scrollHeight")?;
        let height = height.as_u64().ok_or(format!("scrollHeight is {height}"))?;
        self.set_size(1000, height)?;
        let params = json!({"format": "png", "captureBeyondViewport": true});
        let shot = self.call("Page.captureScreenshot", params)?;
        let data = shot["data"].as_str().ok_or("no screenshot data")?;
        let png = data_encoding::BASE64
            .decode(data.as_bytes())
            .map_err(|e| e.to_string())?;
        std::fs::write(path, png).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Sets the page's viewport (Emulation.setDeviceMetricsOverride; height 0 leaves it as it is).
    fn set_size(&mut self, width: u64, height: u64) -> Result<(), String> {
        let params = json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false});
        self.call("Emulation.setDeviceMetricsOverride", params)?;
        // The page takes the new size a moment later: an immediate capture can miss it.
        let applied = format!("innerWidth == {width} && ({height} == 0 || innerHeight == {height})");
        self.wait_for(&applied, COMMAND_TIMEOUT).map(drop)
    }

    /// Starts chromium with a fresh profile and connects to its page.
    fn start(exe: &Path, url: &str) -> Result<Browser, String> {
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        let mut process = Group(child);
        let (port, ws_url) = page_target(&mut process.0, profile.path())?;
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(COMMAND_TIMEOUT))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(COMMAND_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let (socket, _) = tungstenite::client(ws_url.as_str(), stream).map_err(|e| e.to_string())?;
        Ok(Browser {
            socket,
            next_id: 0,
            _process: process,
            _profile: profile,
        })
    }

    /// Sends one DevTools command and returns its `result`, skipping events that arrive first.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let command = json!({"id": id, "method": method, "params": params}).to_string();
        let fail = |e: &dyn std::fmt::Display| format!("{method}: {e}");
        self.socket.send(Message::text(command)).map_err(|e| fail(&e))?;
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        while Instant::now() < deadline {
            let Message::Text(text) = self.socket.read().map_err(|e| fail(&e))? else {
                continue;
            };
            let mut reply: Value = serde_json::from_str(&text).map_err(|e| fail(&e))?;
            if reply["id"] != id {
                continue; // an event, or the late reply to an earlier command
            }
            if let Some(error) = reply.get("error") {
                return Err(fail(error));
            }
            return Ok(reply["result"].take());
        }
        Err(fail(&"no reply in time"))
    }
}

/// JavaScript truthiness of a value returned by value (`undefined` and `NaN` arrive as null).
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// The first `chromium` on the `PATH`.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|exe| exe.is_file())
}

/// The DevTools port and the page target's WebSocket URL, polled for until chromium has both.
fn page_target(child: &mut Child, profile: &Path) -> Result<(u16, String), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut last = "no DevToolsActivePort yet".to_string();
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("chromium exited ({status})"));
        }
        let port = std::fs::read_to_string(profile.join("DevToolsActivePort"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse::<u16>().ok());
        if let Some(port) = port {
            match page_url(port) {
                Ok(url) => return Ok((port, url)),
                Err(e) => last = e,
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("no page target after {START_TIMEOUT:?}: {last}"))
}

/// `webSocketDebuggerUrl` of the first `"type": "page"` entry of `GET /json/list`.
fn page_url(port: u16) -> Result<String, String> {
    let body = http_get(port, "/json/list").map_err(|e| format!("GET /json/list: {e}"))?;
    let targets: Vec<Value> = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    targets
        .iter()
        .find(|t| t["type"] == "page")
        .and_then(|t| t["webSocketDebuggerUrl"].as_str())
        .map(str::to_string)
        .ok_or(format!("no page target in {body}"))
}

/// The body of an HTTP/1.1 GET on 127.0.0.1, read by its Content-Length.
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    // Chromium answers an HTTP/1.0 request with nothing, and keeps an HTTP/1.1 connection open
    // even with `Connection: close`: so HTTP/1.1, and read no further than Content-Length.
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(COMMAND_TIMEOUT))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}
