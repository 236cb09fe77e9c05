//! The page's HTTP server: the page, its updates as server-sent events (one event a change, at
//! most [`POLLS_A_SECOND`] a second, a comment every [`PING`] to keep proxies and SSH forwards
//! open), the raw values under the pointer, and the access token when one is required.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use contrai_doctor::Format;

use crate::assets;
use crate::board::{Board, Snapshot};
use crate::http::{self, Conn, lock};

/// How often the logs are looked at.
pub const POLLS_A_SECOND: u64 = 4;
/// How often a page whose logs do not change is rendered again (for its status).
const RESTATE: Duration = Duration::from_secs(60);
/// The longest an event stream stays silent.
const PING: Duration = Duration::from_secs(15);

/// Why the page could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be listened on.
    #[error("cannot listen on {addr}: {reason} (choose another with --port, or --port 0 for any free one)")]
    Listen {
        /// The address.
        addr: String,
        /// What the system said.
        reason: String,
    },
}

/// What `contrai watch` serves and where.
pub struct Options {
    /// The logs or run directories to follow.
    pub paths: Vec<PathBuf>,
    /// Their format (detected when `None`).
    pub format: Option<Format>,
    /// The interface to listen on (`127.0.0.1` unless asked otherwise).
    pub host: String,
    /// The port (0: any free one).
    pub port: u16,
    /// The token every request must carry (`?token=`), when listening beyond this machine.
    pub token: Option<String>,
}

/// `host:port`, an IPv6 host in brackets.
pub fn socket_addr(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The board and its newest rendering, shared by the poller and the connections.
struct Shared {
    board: Mutex<Board>,
    snapshot: Mutex<Snapshot>,
    changed: Condvar,
}

/// A server listening, not yet serving: its address is known (for `--port 0`).
pub struct Watch {
    listener: TcpListener,
    shared: Arc<Shared>,
    token: Option<String>,
}

impl Watch {
    /// Listens on the options' address and reads the logs once.
    pub fn bind(opts: Options) -> Result<Watch, ServeError> {
        let addr = socket_addr(&opts.host, opts.port);
        let listener = TcpListener::bind(&addr).map_err(|e| ServeError::Listen {
            addr: addr.clone(),
            reason: e.to_string(),
        })?;
        let mut board = Board::new(&opts.paths, opts.format);
        board.poll();
        let snapshot = board.render();
        let shared = Arc::new(Shared {
            board: Mutex::new(board),
            snapshot: Mutex::new(snapshot),
            changed: Condvar::new(),
        });
        Ok(Watch {
            listener,
            shared,
            token: opts.token,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Follows the logs and answers requests until the process ends, or until accepting
    /// connections fails for a reason other than a passing shortage (the error says which).
    pub fn serve(self) -> Result<(), http::Stopped> {
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("contrai-watch-follow".into())
            .spawn(move || follow(&shared))?;
        let (shared, token) = (self.shared, self.token);
        http::serve(self.listener, move |conn| answer(conn, &shared, token.as_deref()))
    }
}

/// Polls the logs; each change renders the page once and wakes every open event stream. A change
/// that took long to read and render (a million points) spaces the next look, so that following a
/// log costs at most a tenth of a core.
fn follow(shared: &Shared) {
    let mut rendered = Instant::now();
    let mut pause = Duration::from_millis(1000 / POLLS_A_SECOND);
    loop {
        std::thread::sleep(pause);
        let start = Instant::now();
        let mut board = lock(&shared.board);
        // A quiet log changes the page too, once a minute: its status says for how long.
        if board.poll() || rendered.elapsed() >= RESTATE {
            let snap = board.render();
            drop(board);
            rendered = Instant::now();
            *lock(&shared.snapshot) = snap;
            shared.changed.notify_all();
            pause = (9 * start.elapsed()).max(Duration::from_millis(1000 / POLLS_A_SECOND));
        } else {
            pause = Duration::from_millis(1000 / POLLS_A_SECOND);
        }
    }
}

/// The query's value of `key`.
fn query<'a>(url: &'a str, key: &str) -> Option<&'a str> {
    url.split_once('?')?
        .1
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// Compares in time that does not depend on where the strings differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a `Host` header names this machine's loopback (`localhost`, `127.0.0.1`, `[::1]`,
/// with or without a port). A page on loopback answers only such requests: a web page the user
/// visits can point a name it controls at 127.0.0.1 (DNS rebinding), but its requests then
/// carry that name.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(v6, |(a, _)| a),
        None => host.rsplit_once(':').map_or(host, |(a, _)| a),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn answer(conn: Conn, shared: &Shared, token: Option<&str>) {
    let url = conn.req.url.clone();
    // On loopback (no token) a request must come by a loopback name; with a token, the token
    // is the check (the page is reached by whatever name the network gives the machine).
    if token.is_none() && !conn.req.host.as_deref().is_some_and(loopback_host) {
        let msg = "403: this page answers only requests to localhost or 127.0.0.1 (Host was not a \
                   loopback name); to reach it from elsewhere use --host with its access token\n";
        return conn.respond(403, "text/plain", msg.as_bytes());
    }
    if let Some(t) = token
        && !query(&url, "token").is_some_and(|q| same_secret(q, t))
    {
        let msg =
            "403: this page needs its access token: open the URL `contrai watch` printed (with ?token=...)\n";
        return conn.respond(403, "text/plain", msg.as_bytes());
    }
    let path = url.split('?').next().unwrap_or("/");
    match path {
        "/" => {
            let snap = lock(&shared.snapshot).clone();
            let html = assets::page(&snap);
            conn.respond(200, "text/html; charset=utf-8", html.as_bytes());
        }
        "/events" => {
            if let Some(out) = conn.into_stream() {
                events(out, shared);
            }
        }
        "/values" => {
            let run = query(&url, "run").and_then(|r| r.parse::<usize>().ok());
            let x = query(&url, "x")
                .and_then(|x| x.parse::<f64>().ok())
                .unwrap_or(0.0);
            let body = lock(&shared.board).values_at(run, x).to_string();
            conn.respond(200, "application/json", body.as_bytes());
        }
        _ => conn.respond(404, "text/plain", b"404: no such page\n"),
    }
}

/// Streams the page's renderings: the newest at once, then one per change.
fn events(mut out: http::EventStream, shared: &Shared) {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: keep-alive\r\nX-Accel-Buffering: no\r\n\r\n";
    if out.write_all(head.as_bytes()).and_then(|()| out.flush()).is_err() {
        return;
    }
    let mut sent = 0u64;
    loop {
        let snap = {
            let guard = lock(&shared.snapshot);
            let (guard, _) = shared
                .changed
                .wait_timeout_while(guard, PING, |s| s.version == sent)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (guard.version != sent).then(|| guard.clone())
        };
        let msg = match snap {
            Some(s) => {
                sent = s.version;
                let data = serde_json::json!({
                    "version": s.version, "html": s.html, "last_step": s.last_step, "title": s.title,
                });
                format!("event: update\ndata: {data}\n\n")
            }
            None => ": ping\n\n".to_string(),
        };
        if out.write_all(msg.as_bytes()).and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::loopback_host;

    #[test]
    fn only_loopback_names_are_loopback_hosts() {
        for ok in [
            "localhost",
            "LOCALHOST:8765",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]:8765",
            "[::1]",
            "127.1.2.3",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:8765",
            "localhost.attacker.example",
            "10.0.0.1:8765",
            "",
            "[::2]:1",
            "0.0.0.0",
        ] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }
}
