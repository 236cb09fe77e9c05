//! `contrai watch`: the live page follows a log as it grows (server-sent events carry each
//! change), a path with no log yet says what it waits for, and beyond loopback a request without
//! the printed access token is refused.

use crate::util;

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
        Served::start_in(Command::new(BIN), args, path)
    }

    /// Started under a limit of `files` open files (the shell's `ulimit -n`).
    fn start_with_file_limit(files: u32, args: &[&str], path: &Path) -> Served {
        let mut sh = Command::new("sh");
        sh.args(["-c", &format!("ulimit -n {files} && exec \"$0\" \"$@\""), BIN]);
        Served::start_in(sh, args, path)
    }

    fn start_in(mut cmd: Command, args: &[&str], path: &Path) -> Served {
        let mut child = cmd
            .arg("watch")
            .arg(path)
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("contrai watch starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
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
        self.connect_as(path, "127.0.0.1")
    }

    /// A GET of `path` sent with `Host: host`.
    fn connect_as(&self, path: &str, host: &str) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        s
    }

    /// The status code and body of a GET.
    fn get(&self, path: &str) -> (u16, String) {
        self.get_as(path, "127.0.0.1")
    }

    /// The status code and body of a GET sent with `Host: host`.
    fn get_as(&self, path: &str, host: &str) -> (u16, String) {
        let mut text = String::new();
        self.connect_as(path, host).read_to_string(&mut text).unwrap();
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (
            code,
            text.split_once("\r\n\r\n")
                .map_or(String::new(), |b| b.1.to_string()),
        )
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
            assert!(
                start.elapsed() < limit,
                "no such update within {limit:?}: last {}",
                v["last_step"]
            );
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
    let loss = values["values"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["series"] == "train_loss")
        .unwrap();
    assert_eq!(loss["step"], 150);
    assert_eq!(loss["value"].as_f64().unwrap() as f32, 2.0 / 151.0);
}

#[test]
fn a_path_with_no_log_waits_and_says_what_it_looks_for() {
    let dir = TempDir::new();
    let served = Served::start(&[], &dir.join("lightning_logs"));
    let (code, page) = served.get("/");
    assert_eq!(code, 200);
    assert!(
        page.contains("Waiting for") && page.contains("lightning_logs"),
        "{page}"
    );
    assert!(
        page.contains("TensorBoard event files") && page.contains("trainer_state.json"),
        "{page}"
    );
    let mut updates = Updates(BufReader::new(served.connect("/events")));
    updates.next();
    std::fs::create_dir_all(dir.join("lightning_logs/version_0")).unwrap();
    std::fs::write(
        dir.join("lightning_logs/version_0/metrics.csv"),
        "step,train_loss\n1,0.9\n2,0.7\n",
    )
    .unwrap();
    let (v, _) = updates.until(Duration::from_secs(5), |v| v["last_step"] == 2);
    assert!(!v["html"].as_str().unwrap().contains("Waiting for"));
}

#[test]
fn beyond_loopback_a_request_without_the_token_is_refused() {
    let dir = TempDir::new();
    std::fs::write(dir.join("metrics.csv"), "step,train_loss\n1,0.9\n2,0.7\n").unwrap();
    let served = Served::start(&["--host", "0.0.0.0"], dir.path());
    let token = served
        .url
        .split_once("?token=")
        .map(|t| t.1.to_string())
        .expect("a token in the URL");
    assert_eq!(token.len(), 32);
    for refused in [
        "/",
        "/events",
        "/values?x=1",
        "/?token=0123",
        &format!("/?token={}x", &token),
    ] {
        let (code, body) = served.get(refused);
        assert_eq!(code, 403, "{refused}");
        assert!(body.contains("access token"), "{body}");
    }
    assert_eq!(served.get(&format!("/?token={token}")).0, 200);
    assert_eq!(served.get(&format!("/values?x=1&token={token}")).0, 200);
}

#[test]
fn on_loopback_a_request_by_a_foreign_host_name_is_refused() {
    let dir = TempDir::new();
    std::fs::write(dir.join("metrics.csv"), "step,train_loss\n1,0.9\n2,0.7\n").unwrap();
    let served = Served::start(&[], dir.path());
    let port = served.port;
    for foreign in [
        "attacker.example",
        &format!("attacker.example:{port}"),
        "localhost.attacker.example",
    ] {
        for path in ["/", "/events", "/values?x=1"] {
            let (code, body) = served.get_as(path, foreign);
            assert_eq!(code, 403, "{foreign} {path}");
            assert!(body.contains("loopback"), "{body}");
        }
    }
    for own in [
        "127.0.0.1",
        &format!("127.0.0.1:{port}"),
        &format!("localhost:{port}"),
        &format!("[::1]:{port}"),
    ] {
        assert_eq!(served.get_as("/", own).0, 200, "{own}");
    }
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

/// A Contrai run directory written as a training process writes it: `run.json`, then one
/// `metrics.jsonl` row an optimizer step and `decisions.jsonl` rows, appended.
struct Trainer {
    dir: std::path::PathBuf,
}

impl Trainer {
    fn start(dir: &Path) -> Trainer {
        let run = contrai_run::RunDir::new(dir);
        std::fs::create_dir_all(dir).unwrap();
        contrai_run::RunFormat::stamp(&run, "watch test").unwrap();
        Trainer {
            dir: dir.to_path_buf(),
        }
    }

    fn steps(&self, from: u64, to: u64, loss: impl Fn(u64) -> f32) {
        let mut rows = String::new();
        for step in from..=to {
            let row = contrai_run::TrainRow {
                step,
                phase: contrai_recipe::Phase::Main,
                samples: 32 * step,
                train_loss: loss(step),
                lr: 1e-3,
                grad_norm: 0.8,
                batch_size: 32,
                wall_s: 0.05 * step as f64,
            };
            rows.push_str(&serde_json::to_string(&row).unwrap());
            rows.push('\n');
            if step % 50 == 0 {
                let eval = contrai_run::EvalRow {
                    step,
                    phase: contrai_recipe::Phase::Main,
                    val_loss: 1.0 / (1.0 + step as f32 / 100.0),
                    val_accuracy: 0.5 + step as f32 / 1000.0,
                };
                rows.push_str(&serde_json::to_string(&eval).unwrap());
                rows.push('\n');
            }
        }
        append(&self.dir.join("metrics.jsonl"), rows.as_bytes());
    }

    fn decide(&self, step: u64, kind: contrai_run::DecisionKind, reason: &str) {
        let evidence = serde_json::json!({ "train_loss_window": 0.41, "steps_flat": 60 });
        let d = contrai_run::Decision::new(step, contrai_recipe::Phase::Main, kind, reason, evidence);
        let line = format!("{}\n", serde_json::to_string(&d).unwrap());
        append(&self.dir.join("decisions.jsonl"), line.as_bytes());
    }
}

/// The page's live text holds `needle`.
fn shows(needle: &str) -> String {
    format!("document.getElementById('live').innerText.includes({needle:?})")
}

#[test]
fn in_a_browser_points_a_decision_and_a_finding_appear_within_2_s() {
    let tmp = TempDir::new();
    let trainer = Trainer::start(&tmp.join("run"));
    let falling = |s: u64| 2.0 / (1.0 + s as f32 / 50.0);
    trainer.steps(1, 100, falling);
    trainer.decide(
        10,
        contrai_run::DecisionKind::ValidatePassed,
        "one batch overfitted",
    );
    let served = Served::start(&[], &tmp.join("run"));
    let Some(mut browser) = contrai_testkit::browser::Browser::open(&served.url) else {
        return;
    };
    let limit = Duration::from_secs(2);
    browser
        .wait_for("document.body.dataset.lastStep == '100'", Duration::from_secs(10))
        .unwrap();
    browser.wait_for(&shows("validate_passed"), limit).unwrap();
    // New points.
    trainer.steps(101, 150, falling);
    let took = browser.wait_for("document.body.dataset.lastStep == '150'", limit);
    assert!(took.is_ok(), "points: {took:?}");
    // A decision, with its evidence.
    trainer.decide(
        150,
        contrai_run::DecisionKind::LrCutPlateau,
        "the training loss plateaued",
    );
    let took = browser.wait_for(&shows("lr_cut_plateau"), limit);
    assert!(took.is_ok(), "decision: {took:?}");
    assert_eq!(browser.eval(&shows("steps_flat")).unwrap(), true);
    // A finding: the loss turns non-finite.
    trainer.steps(151, 160, |s| if s > 155 { f32::NAN } else { falling(s) });
    let took = browser.wait_for(&shows("nonfinite"), limit);
    assert!(took.is_ok(), "finding: {took:?}");
    // With its recommendation: what `contrai doctor` says of the log as it stands.
    assert_eq!(
        browser
            .eval(&shows("train_loss first became non-finite at step 156"))
            .unwrap(),
        true
    );
    assert_eq!(
        browser
            .eval("document.querySelectorAll('#live svg').length >= 3")
            .unwrap(),
        true
    );
    // The raw values under the pointer: the page asks the server, and shows them.
    let hover = "(() => { const s = document.querySelector('#live svg[data-x0]'); const b = s.getBoundingClientRect(); \
        s.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: b.left + b.width / 2, clientY: b.top + b.height / 2})); return true; })()";
    browser.eval(hover).unwrap();
    browser
        .wait_for(
            "document.getElementById('tip').innerText.includes('train_loss')",
            limit,
        )
        .unwrap();
    if let Some(png) = std::env::var_os("CONTRAI_WATCH_SCREENSHOT") {
        browser.screenshot(Path::new(&png)).unwrap();
    }
}

/// The page's peak resident memory in kB (`VmHWM`).
fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Sends `head` (as much as the page takes) and returns the status code it answered with.
fn status_after_sending(port: u16, head: Vec<u8>) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        // The page stops reading at its limit and closes: the rest of the write fails.
        let _ = w.write_all(&head);
    });
    let mut text = Vec::new();
    let _ = s.read_to_end(&mut text);
    let _ = writer.join();
    String::from_utf8_lossy(&text)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_huge_header_or_url_is_refused_before_it_is_read() {
    let dir = TempDir::new();
    std::fs::write(dir.join("metrics.csv"), "step,train_loss\n1,0.9\n2,0.7\n").unwrap();
    let served = Served::start(&[], dir.path());
    let mut head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ".to_vec();
    head.resize(head.len() + (100 << 20), b'a');
    head.extend_from_slice(b"\r\n\r\n");
    assert_eq!(status_after_sending(served.port, head), 431);
    let mut url = b"GET /?".to_vec();
    url.resize(url.len() + (100 << 20), b'a');
    url.extend_from_slice(b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    assert_eq!(status_after_sending(served.port, url), 414);
    let rss = peak_rss_kb(served.child.id());
    assert!(rss < 64 * 1024, "peak RSS {rss} kB");
    assert_eq!(served.get("/").0, 200, "the page still answers");
}

#[test]
fn idle_connections_beyond_the_open_file_limit_do_not_take_the_page_down() {
    let dir = TempDir::new();
    std::fs::write(dir.join("metrics.csv"), "step,train_loss\n1,0.9\n2,0.7\n").unwrap();
    let mut served = Served::start_with_file_limit(256, &[], dir.path());
    // 600 connections that never send a request.
    let idle: Vec<TcpStream> = (0..600)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", served.port)).ok())
        .collect();
    // More than the page may hold open (256 files), however many this process could open.
    assert!(idle.len() > 256, "{} idle connections opened", idle.len());
    let start = Instant::now();
    let answered = loop {
        let mut s = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = write!(s, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        if text.starts_with("HTTP/1.1 200") {
            break true;
        }
        if start.elapsed() > Duration::from_secs(30) {
            break false;
        }
    };
    assert!(
        answered,
        "the page answered no request within 30 s under 600 idle connections"
    );
    assert!(
        served.child.try_wait().unwrap().is_none(),
        "the page's process stays up"
    );
    drop(idle);
}
