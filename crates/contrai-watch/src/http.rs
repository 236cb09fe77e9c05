//! The page's HTTP/1.1 server, bounded against a hostile network: GET requests only, each on its
//! own connection; a request line and headers read within [`HEAD_LIMIT`] bytes and
//! [`HEAD_TIMEOUT`] (414 or 431 past the limit, before anything else is read); at most
//! [`MAX_PENDING`] connections waiting for their request (a new one beyond sends the oldest
//! away, so that idle sockets cannot starve the page); at most [`MAX_STREAMS`] event streams;
//! accept and thread errors said on stderr, and an error that is not a passing shortage of
//! resources ends the server with it.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most bytes of a request line...
pub const URL_LIMIT: usize = 8 * 1024;
/// ...and of the request line and headers together.
pub const HEAD_LIMIT: usize = 16 * 1024;
/// The longest a connection may take to send its request.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest one write may wait on a client that does not read.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections waiting for their request at once.
pub const MAX_PENDING: usize = 128;
/// Event streams open at once.
pub const MAX_STREAMS: usize = 32;

/// A request's line and the headers the page reads.
#[derive(Debug, Default)]
pub struct Request {
    /// The path and query (`/values?x=3`).
    pub url: String,
    /// The `Host` header, when sent.
    pub host: Option<String>,
}

/// A connection with its request read, ready to answer.
pub struct Conn {
    stream: Arc<TcpStream>,
    /// The request it sent.
    pub req: Request,
    streams: Arc<AtomicUsize>,
}

impl Conn {
    /// Answers with a whole body and closes.
    pub fn respond(self, code: u16, content_type: &str, body: &[u8]) {
        let head = format!(
            "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            reason(code),
            body.len()
        );
        let mut out = &*self.stream;
        let _ = out
            .write_all(head.as_bytes())
            .and_then(|()| out.write_all(body))
            .and_then(|()| out.flush());
    }

    /// The connection as an event stream (after its head is written), or a 503 answer when
    /// [`MAX_STREAMS`] are open.
    pub fn into_stream(self) -> Option<EventStream> {
        if self.streams.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
            self.streams.fetch_sub(1, Ordering::SeqCst);
            self.respond(503, "text/plain", b"503: too many live pages open; close one\n");
            return None;
        }
        Some(EventStream {
            stream: self.stream,
            streams: self.streams,
        })
    }
}

/// An open event stream; counted until dropped.
pub struct EventStream {
    stream: Arc<TcpStream>,
    streams: Arc<AtomicUsize>,
}

impl Write for EventStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.stream).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.stream).flush()
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
#[error("the page's server stopped: {0}")]
pub struct Stopped(#[from] pub std::io::Error);

/// The connections waiting for their request, oldest first, by id (shared with their threads,
/// not duplicated: a waiting connection costs one descriptor).
type Pending = Arc<Mutex<VecDeque<(u64, Arc<TcpStream>)>>>;

/// Accepts connections on `listener` and hands each request to `answer` on its own thread, until
/// accepting fails for a reason other than a passing shortage of resources.
pub fn serve(listener: TcpListener, answer: impl Fn(Conn) + Send + Sync + 'static) -> Result<(), Stopped> {
    let answer = Arc::new(answer);
    let pending: Pending = Arc::default();
    let streams = Arc::new(AtomicUsize::new(0));
    let ids = AtomicU64::new(0);
    let mut said = Said::default();
    for incoming in listener.incoming() {
        let stream = match incoming {
            Ok(s) => s,
            Err(e) if passing(&e) => {
                said.once(&format!("cannot accept a connection: {e} (the page goes on)"));
                // Free a descriptor: the connection that has waited longest for its request.
                send_oldest_away(&pending);
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(Stopped(e)),
        };
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let stream = Arc::new(stream);
        {
            let mut p = lock(&pending);
            if p.len() >= MAX_PENDING
                && let Some((_, oldest)) = p.pop_front()
            {
                let _ = oldest.shutdown(Shutdown::Both);
            }
            p.push_back((id, Arc::clone(&stream)));
        }
        let (answer, pending2, streams) = (Arc::clone(&answer), Arc::clone(&pending), Arc::clone(&streams));
        let spawned = std::thread::Builder::new()
            .name("contrai-watch-conn".into())
            .spawn(move || handle(stream, id, &pending2, streams, &*answer));
        if let Err(e) = spawned {
            said.once(&format!(
                "cannot start a thread for a connection: {e} (it is closed; the page goes on)"
            ));
            remove(&pending, id);
        }
    }
    Ok(())
}

/// Reads one connection's request and answers it.
fn handle(
    stream: Arc<TcpStream>,
    id: u64,
    pending: &Pending,
    streams: Arc<AtomicUsize>,
    answer: &dyn Fn(Conn),
) {
    let head = read_head(&stream);
    remove(pending, id);
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    match head {
        Ok(req) => answer(Conn { stream, req, streams }),
        Err(Refused(code, msg)) => Conn {
            stream,
            req: Request::default(),
            streams,
        }
        .respond(code, "text/plain", msg.as_bytes()),
        Err(Gone) => {}
    }
}

/// Why a request is not answered as asked.
enum HeadError {
    /// With this status and message.
    Refused(u16, &'static str),
    /// The client went, or took too long: nothing to say.
    Gone,
}
use HeadError::{Gone, Refused};

/// Reads the request line and headers within the limits.
fn read_head(stream: &TcpStream) -> Result<Request, HeadError> {
    let deadline = Instant::now() + HEAD_TIMEOUT;
    let mut reader = BufReader::new(Read::take(stream, HEAD_LIMIT as u64 + 1));
    let mut line = Vec::new();
    let mut read_line = |line: &mut Vec<u8>, limit: usize| -> Result<(), HeadError> {
        line.clear();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Gone);
            }
            let _ = stream.set_read_timeout(Some(left));
            let buf = reader.fill_buf().map_err(|_| Gone)?;
            if buf.is_empty() {
                return Err(if line.len() >= limit {
                    Refused(431, "431: request headers too large\n")
                } else {
                    Gone
                });
            }
            let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..=i], true),
                None => (buf, false),
            };
            let n = chunk.len();
            line.extend_from_slice(chunk);
            reader.consume(n);
            if line.len() > limit {
                return Err(Refused(431, "431: request headers too large\n"));
            }
            if done {
                return Ok(());
            }
        }
    };
    read_line(&mut line, URL_LIMIT + 16).map_err(|e| match e {
        Refused(..) => Refused(414, "414: URL too long\n"),
        g => g,
    })?;
    let text = String::from_utf8_lossy(&line).into_owned();
    let mut parts = text.split_whitespace();
    let (method, url) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if url.len() > URL_LIMIT {
        return Err(Refused(414, "414: URL too long\n"));
    }
    if method != "GET" {
        return Err(Refused(405, "405: the page answers GET only\n"));
    }
    let url = url.to_string();
    let mut host = None;
    let mut total = line.len();
    loop {
        read_line(&mut line, HEAD_LIMIT - total.min(HEAD_LIMIT))?;
        total += line.len();
        let h = String::from_utf8_lossy(&line);
        let h = h.trim_end_matches(['\r', '\n']);
        if h.is_empty() {
            return Ok(Request { url, host });
        }
        if let Some((name, value)) = h.split_once(':')
            && name.trim().eq_ignore_ascii_case("host")
        {
            host = Some(value.trim().to_string());
        }
    }
}

fn remove(pending: &Pending, id: u64) {
    lock(pending).retain(|(i, _)| *i != id);
}

fn send_oldest_away(pending: &Pending) {
    if let Some((_, s)) = lock(pending).pop_front() {
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// Whether an accept error is a passing shortage (descriptors, memory, a client that left).
fn passing(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock | OutOfMemory
    ) || matches!(e.raw_os_error(), Some(23 | 24 | 105 | 12)) // ENFILE, EMFILE, ENOBUFS, ENOMEM
}

/// The guarded value, whether or not a thread panicked holding it (the page goes on).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Messages said once a minute at most each, so that a flood does not flood stderr.
#[derive(Default)]
struct Said(Vec<(String, Instant)>);

impl Said {
    fn once(&mut self, msg: &str) {
        let now = Instant::now();
        match self.0.iter_mut().find(|(m, _)| m == msg) {
            Some((_, at)) if now.duration_since(*at) < Duration::from_secs(60) => {}
            Some((_, at)) => {
                *at = now;
                eprintln!("contrai watch: {msg}");
            }
            None => {
                self.0.push((msg.to_string(), now));
                eprintln!("contrai watch: {msg}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::passing;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_shortage_passes_and_anything_else_stops_the_server() {
        for os in [23, 24, 105, 12] {
            assert!(passing(&Error::from_raw_os_error(os)), "os error {os}");
        }
        assert!(passing(&Error::from(ErrorKind::ConnectionAborted)));
        for os in [9, 22, 88] {
            // EBADF, EINVAL, ENOTSOCK: the listener itself is gone.
            assert!(!passing(&Error::from_raw_os_error(os)), "os error {os}");
        }
    }
}
