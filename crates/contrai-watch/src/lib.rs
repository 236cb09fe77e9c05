//! Contrai's live page: a run followed as it trains, from any framework's log, in a browser — the
//! four signals on shared step axes, the lifecycle's phases and decisions, the live doctor's
//! findings, the pace and the time left, updated as the log grows.
//!
//! One binary, nothing fetched from the network: the page is the report's own sections, sent
//! again as a server-sent event whenever a log grows (only what was appended is read).

#![warn(missing_docs)]

mod assets;
pub mod board;
pub mod http;
pub mod server;

pub use board::{Board, LOOKING_FOR, Snapshot};
pub use server::{Options, ServeError, Watch};

/// A fresh access token (128 random bits from the system, as hex).
pub fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
