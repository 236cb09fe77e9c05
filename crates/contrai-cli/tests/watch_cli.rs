//! `contrai watch`: the live page follows a log as it grows (server-sent events carry each
//! change), a path with no log yet says what it waits for, and beyond loopback a request without
//! the printed access token is refused.

mod util;

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use contrai_testkit::tfevents;
use serde_json::Value;
use util::{BIN, TempDir};

/// A `contrai watch` process, killed when dropped.
struct Served {
    child: Child,
    /// The URL it printed (with its token, when it has one).
    url: String,
    port: u16,
}

impl Served {
    fn start(args: &[&str], path: &Path) -> Served {
        let mut child = Command::new(BIN)
            .arg("watch")
            .arg(path)
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("contrai watch starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_string();
        let port = url
            .trim_start_matches("http://")
            .split(['/', '?'])
            .next()
            .and_then(|hp| hp.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {url}"));
        Served { child, url, port }
    }

    fn connect(&self, path: &str) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
        s
    }

    /// The status code and body of a GET.
    fn get(&self, path: &str) -> (u16, String) {
        let mut text = String::new();
        self.connect(path).read_to_string(&mut text).unwrap();
        let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (code, text.split_once("\r\n\r\n").map_or(String::new(), |b| b.1.to_string()))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The updates of a page's event stream.
struct Updates(BufReader<TcpStream>);

impl Updates {
    /// The next update's data.
    fn next(&mut self) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.0.read_line(&mut line).unwrap() > 0, "the stream ended");
            if let Some(data) = line.strip_prefix("data: ") {
                return serde_json::from_str(data).unwrap();
            }
        }
    }

    /// Updates until one satisfies `done`, within `limit`; returns it and the time it took.
    fn until(&mut self, limit: Duration, done: impl Fn(&Value) -> bool) -> (Value, Duration) {
        let start = Instant::now();
        loop {
            let v = self.next();
            if done(&v) {
                return (v, start.elapsed());
            }
            assert!(start.elapsed() < limit, "no such update within {limit:?}: last {}", v["last_step"]);
        }
    }
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new().create(true).append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

fn events(from: u64, to: u64) -> Vec<u8> {
    (from..to)
        .flat_map(|i| {
            let mut r = tfevents::scalar(i, "train/loss", 2.0 / (1.0 + i as f32), false);
            r.extend(tfevents::scalar(i, "train/learning_rate", 1e-4, false));
            r
        })
        .collect()
}

#[test]
fn the_page_follows_tensorboard_events_as_they_are_appended() {
    let dir = TempDir::new();
    let file = dir.join("events.out.tfevents.1700000000.host.1.0");
    append(&file, &events(0, 100));
    let served = Served::start(&[], dir.path());
    let (code, page) = served.get("/");
    assert_eq!(code, 200);
    assert!(page.contains("<svg") && page.contains("EventSource"), "{page}");
    let mut updates = Updates(BufReader::new(served.connect("/events")));
    let first = updates.next();
    assert_eq!(first["last_step"], 99);
    // Half a record first (a writer mid-flush), then the rest.
    let more = events(100, 200);
    append(&file, &more[..more.len() / 2 + 3]);
    std::thread::sleep(Duration::from_millis(300));
    append(&file, &more[more.len() / 2 + 3..]);
    let (v, took) = updates.until(Duration::from_secs(5), |v| v["last_step"] == 199);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(v["html"].as_str().unwrap().contains("train/loss"));
    // The raw value under the pointer, not the drawn one.
    let (_, values) = served.get("/values?run=0&x=150.2");
    let values: Value = serde_json::from_str(&values).unwrap();
    let loss = values["values"].as_array().unwrap().iter().find(|r| r["series"] == "train_loss").unwrap();
    assert_eq!(loss["step"], 150);
    assert_eq!(loss["value"].as_f64().unwrap() as f32, 2.0 / 151.0);
}

#[test]
fn a_path_with_no_log_waits_and_says_what_it_looks_for() {
    let dir = TempDir::new();
    let served = Served::start(&[], &dir.join("lightning_logs"));
    let (code, page) = served.get("/");
    assert_eq!(code, 200);
    assert!(page.contains("Waiting for") && page.contains("lightning_logs"), "{page}");
    assert!(page.contains("TensorBoard event files") && page.contains("trainer_state.json"), "{page}");
    let mut updates = Updates(BufReader::new(served.connect("/events")));
    updates.next();
    std::fs::create_dir_all(dir.join("lightning_logs/version_0")).unwrap();
    std::fs::write(dir.join("lightning_logs/version_0/metrics.csv"), "step,train_loss\n1,0.9\n2,0.7\n").unwrap();
    let (v, _) = updates.until(Duration::from_secs(5), |v| v["last_step"] == 2);
    assert!(!v["html"].as_str().unwrap().contains("Waiting for"));
}

#[test]
fn beyond_loopback_a_request_without_the_token_is_refused() {
    let dir = TempDir::new();
    std::fs::write(dir.join("metrics.csv"), "step,train_loss\n1,0.9\n2,0.7\n").unwrap();
    let served = Served::start(&["--host", "0.0.0.0"], dir.path());
    let token = served.url.split_once("?token=").map(|t| t.1.to_string()).expect("a token in the URL");
    assert_eq!(token.len(), 32);
    for refused in ["/", "/events", "/values?x=1", "/?token=0123", &format!("/?token={}x", &token)] {
        let (code, body) = served.get(refused);
        assert_eq!(code, 403, "{refused}");
        assert!(body.contains("access token"), "{body}");
    }
    assert_eq!(served.get(&format!("/?token={token}")).0, 200);
    assert_eq!(served.get(&format!("/values?x=1&token={token}")).0, 200);
}

#[test]
fn a_port_in_use_is_an_error_that_says_what_to_do() {
    let dir = TempDir::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = util::contrai(["watch", "--port", &port]).arg(dir.path()).output();
    out.assert_code(2);
    out.assert_stderr_contains(&["cannot listen on 127.0.0.1:", "--port 0"]);
}
