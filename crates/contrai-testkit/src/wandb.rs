//! W&B run files written by hand (`run-<id>.wandb`: the `:W&B` header, LevelDB's log framing in
//! 32 KiB blocks with CRC-32 checksums, and W&B's `Record` protobufs), for tests of the reader
//! and of a run file followed as it grows.

use crate::proto::{field_bytes, field_varint};

/// LevelDB's block size: a record header never crosses a block's end.
const BLOCK: usize = 32 * 1024;

/// A run file's bytes, record after record as W&B appends them.
#[derive(Clone, Debug)]
pub struct RunFile {
    bytes: Vec<u8>,
    records: u64,
}

impl Default for RunFile {
    fn default() -> Self {
        Self::new()
    }
}

impl RunFile {
    /// A file holding only its header (`:W&B`, magic 0xBEE1, version 0).
    pub fn new() -> RunFile {
        RunFile {
            bytes: vec![b':', b'W', b'&', b'B', 0xE1, 0xBE, 0],
            records: 0,
        }
    }

    /// The file so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Appends one record's data, cut into first, middle and last pieces where it crosses a
    /// block's end (a block's last 6 bytes or fewer are padding).
    pub fn record(&mut self, data: &[u8]) {
        let mut rest = data;
        let mut first = true;
        loop {
            let left = BLOCK - self.bytes.len() % BLOCK;
            if left < 7 {
                self.bytes.resize(self.bytes.len() + left, 0);
                continue;
            }
            let room = left - 7;
            let (piece, more) = rest.split_at(rest.len().min(room));
            let last = more.is_empty();
            let kind = match (first, last) {
                (true, true) => 1,
                (true, false) => 2,
                (false, false) => 3,
                (false, true) => 4,
            };
            let mut hasher = crc32fast::Hasher::new();
            hasher.update(&[kind]);
            hasher.update(piece);
            self.bytes.extend_from_slice(&hasher.finalize().to_le_bytes());
            self.bytes.extend_from_slice(
                &u16::try_from(piece.len())
                    .expect("a piece fits a block")
                    .to_le_bytes(),
            );
            self.bytes.push(kind);
            self.bytes.extend_from_slice(piece);
            if last {
                return;
            }
            rest = more;
            first = false;
        }
    }

    /// A `Record` with its number and one field `field` holding `message`.
    fn numbered(&mut self, field: u32, message: &[u8]) {
        self.records += 1;
        let mut rec = Vec::new();
        field_varint(1, self.records, &mut rec);
        field_bytes(field, message, &mut rec);
        self.record(&rec);
    }

    /// The run record: its id and display name.
    pub fn run(&mut self, id: &str, display_name: &str) {
        let mut run = Vec::new();
        field_bytes(1, id.as_bytes(), &mut run);
        field_bytes(8, display_name.as_bytes(), &mut run);
        self.numbered(17, &run);
    }

    /// A config record: each `(key, value as JSON)`.
    pub fn config(&mut self, items: &[(&str, &str)]) {
        let mut config = Vec::new();
        for (key, json) in items {
            let mut item = Vec::new();
            field_bytes(1, key.as_bytes(), &mut item);
            field_bytes(16, json.as_bytes(), &mut item);
            field_bytes(1, &item, &mut config);
        }
        self.numbered(5, &config);
    }

    /// One `wandb.log` row at W&B's step `step`: each `(key, value as JSON)`, keys as W&B keeps
    /// them (`nested_key`), plus its own `_step`.
    pub fn history(&mut self, step: u64, items: &[(&str, &str)]) {
        let mut history = Vec::new();
        let own = step.to_string();
        for (key, json) in items.iter().chain([&("_step", own.as_str())]) {
            let mut item = Vec::new();
            field_bytes(2, key.as_bytes(), &mut item);
            field_bytes(16, json.as_bytes(), &mut item);
            field_bytes(1, &item, &mut history);
        }
        let mut num = Vec::new();
        field_varint(1, step, &mut num);
        field_bytes(2, &num, &mut history);
        self.numbered(2, &history);
    }
}
