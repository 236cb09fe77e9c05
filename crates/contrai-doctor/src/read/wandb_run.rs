//! Weights & Biases run files (`wandb/run-*/run-<id>.wandb`, online or offline): W&B's own
//! record log, read as it grows. The file is a 7-byte header (`:W&B`, magic `0xBEE1`, version 0)
//! and LevelDB's log format: 32 KiB blocks of records, each a 7-byte header (CRC-32 of the type
//! byte and the data, length, type) and its data, a record longer than what is left of a block
//! cut into first, middle and last pieces. Each record's data is a protobuf `Record`: the history
//! rows (`wandb.log`), the config (the run's arguments) and the run itself (its name) are read.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::context::json_scalar;
use super::json_tolerant::{parse_tolerant, value_f64};
use super::proto::{Fields, Wire};
use super::{ReadError, Stream, to_step};
use crate::series::{Partial, RawRun};

/// The file's header: `:W&B`, the magic 0xBEE1 (little-endian), version 0.
const HEADER: [u8; 7] = [b':', b'W', b'&', b'B', 0xE1, 0xBE, 0];
/// LevelDB's block: no record header crosses one.
const BLOCK: u64 = 32 * 1024;
/// A record's header: CRC-32 (4), length (2), type (1).
const RECORD_HEADER: usize = 7;

/// The keys a framework logs its own step under, best first (W&B's `_step` counts `log` calls,
/// which a Trainer makes several of a step): Hugging Face's `WandbCallback`, Lightning's
/// `WandbLogger`, and plain scripts.
const STEP_KEYS: [&str; 4] = ["train/global_step", "trainer/global_step", "global_step", "step"];

/// Whether the bytes start like a W&B run file.
pub fn is_run_file(head: &[u8]) -> bool {
    head.starts_with(&HEADER[..4])
}

/// The run file of a W&B run folder (`run-…/` or `offline-run-…/` holding `run-<id>.wandb`), or
/// `None` for another folder. Its `files/` and `logs/` hold no metrics the run file lacks.
pub fn file_in(dir: &Path) -> Option<PathBuf> {
    let name = dir.file_name()?.to_string_lossy().into_owned();
    if !(name.starts_with("run-") || name.starts_with("offline-run-")) {
        return None;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "wandb"))
        .collect();
    files.sort();
    files.into_iter().next()
}

/// A `.wandb` file read record by record as it grows; a record still being written waits.
pub struct WandbRun {
    path: PathBuf,
    /// Bytes of the file taken so far (records end on them): where in its block the next is.
    taken: u64,
    /// The run's name was taken from its run record.
    named: bool,
}

/// The pieces of one logical record as they are joined.
enum Piece {
    Full,
    First,
    Middle,
    Last,
}

impl WandbRun {
    /// A reader at the start of `path`.
    pub fn new(path: &Path) -> WandbRun {
        WandbRun {
            path: path.to_path_buf(),
            taken: 0,
            named: false,
        }
    }

    /// The run it reads into, named after its folder (`offline-run-20261206_200740-sraoyih1`)
    /// until the run record names it.
    pub fn run(path: &Path) -> RawRun {
        let name = path
            .parent()
            .and_then(Path::file_name)
            .or_else(|| path.file_stem())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        RawRun::new(name, path.display().to_string(), "wandb")
    }

    fn corrupt(&self, offset: u64, reason: impl Into<String>) -> ReadError {
        ReadError::Corrupt {
            path: self.path.clone(),
            offset,
            reason: reason.into(),
        }
    }

    /// The next whole logical record from `at` (an offset into `data`, whose first byte is the
    /// file's byte `self.taken`): its data and the offset past it, or `None` when it is not all
    /// written yet.
    fn next_record(&self, data: &[u8], mut at: usize) -> Result<Option<(Vec<u8>, usize)>, ReadError> {
        let mut joined: Option<Vec<u8>> = None;
        loop {
            let file_at = self.taken + at as u64;
            let left = (BLOCK - file_at % BLOCK) as usize;
            if left < RECORD_HEADER {
                // The block's tail is padding; the next record starts the next block.
                if data.len() < at + left {
                    return Ok(None);
                }
                at += left;
                continue;
            }
            let Some(header) = data.get(at..at + RECORD_HEADER) else {
                return Ok(None);
            };
            let crc = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
            let len = usize::from(u16::from_le_bytes([header[4], header[5]]));
            let kind = header[6];
            if kind == 0 && len == 0 && crc == 0 {
                // Zeros past the last record: space the writer has not filled yet.
                return Ok(None);
            }
            let Some(body) = data.get(at + RECORD_HEADER..at + RECORD_HEADER + len) else {
                return Ok(None);
            };
            let mut hasher = crc32fast::Hasher::new();
            hasher.update(&[kind]);
            hasher.update(body);
            if hasher.finalize() != crc {
                return Err(self.corrupt(file_at, "record checksum mismatch"));
            }
            let piece = match kind {
                1 => Piece::Full,
                2 => Piece::First,
                3 => Piece::Middle,
                4 => Piece::Last,
                k => return Err(self.corrupt(file_at, format!("record type {k} (expected 1 to 4)"))),
            };
            at += RECORD_HEADER + len;
            match (piece, joined.as_mut()) {
                (Piece::Full, None) => return Ok(Some((body.to_vec(), at))),
                (Piece::First, None) => joined = Some(body.to_vec()),
                (Piece::Middle, Some(j)) => j.extend_from_slice(body),
                (Piece::Last, Some(j)) => {
                    j.extend_from_slice(body);
                    return Ok(joined.map(|j| (j, at)));
                }
                _ => return Err(self.corrupt(file_at, "a record piece out of order")),
            }
        }
    }

    /// Takes one `Record`'s history row, config or run name into `run`.
    fn record(&mut self, run: &mut RawRun, data: &[u8]) {
        for (field, wire) in Fields::new(data) {
            match (field, wire) {
                (2, Wire::Bytes(history)) => history_row(run, history),
                (5, Wire::Bytes(config)) => config_items(run, config),
                (17, Wire::Bytes(record)) => self.run_record(run, record),
                _ => {}
            }
        }
    }

    /// The run's display name (else its id) and the config it started with.
    fn run_record(&mut self, run: &mut RawRun, data: &[u8]) {
        let mut id = None;
        let mut display = None;
        for (field, wire) in Fields::new(data) {
            match (field, wire) {
                (1, Wire::Bytes(b)) => id = Some(String::from_utf8_lossy(b).into_owned()),
                (8, Wire::Bytes(b)) => display = Some(String::from_utf8_lossy(b).into_owned()),
                (4, Wire::Bytes(config)) => config_items(run, config),
                _ => {}
            }
        }
        if let Some(name) = display
            .filter(|n| !n.is_empty())
            .or(id)
            .filter(|n| !n.is_empty() && !self.named)
        {
            self.named = true;
            run.name = name;
        }
    }
}

/// A history, config or summary item: its key (`key`, or its `nested_key` parts joined with
/// `/`), its value as JSON, and the number a newer writer may type instead.
fn item_key(data: &[u8]) -> (String, Option<&[u8]>, Option<f64>) {
    let mut key = String::new();
    let mut nested: Vec<String> = Vec::new();
    let mut json = None;
    let mut number = None;
    for (field, wire) in Fields::new(data) {
        match (field, wire) {
            (1, Wire::Bytes(b)) => key = String::from_utf8_lossy(b).into_owned(),
            (2, Wire::Bytes(b)) => nested.push(String::from_utf8_lossy(b).into_owned()),
            (16, Wire::Bytes(b)) => json = Some(b),
            // Newer writers may type a value: a double, or an integer.
            (6, Wire::Fixed64(bits)) => number = Some(f64::from_bits(bits)),
            (5, Wire::Varint(v)) => number = Some(v as i64 as f64),
            _ => {}
        }
    }
    if key.is_empty() {
        key = nested.join("/");
    }
    (key, json, number)
}

/// A JSON value as a number: numbers, and the non-finite ones Python's json writes bare (`NaN`,
/// `Infinity`, `-Infinity`), as every JSON reader of the doctor takes them.
fn json_number(text: &[u8]) -> Option<f64> {
    parse_tolerant(std::str::from_utf8(text).ok()?)
        .ok()
        .as_ref()
        .and_then(value_f64)
}

/// One `wandb.log` row: each numeric item at the row's step (the framework's own, when it logs
/// one; else W&B's `_step`). W&B's own bookkeeping (`_runtime`, `_timestamp`, `_wandb`) is left.
fn history_row(run: &mut RawRun, data: &[u8]) {
    let mut items: Vec<(String, f64)> = Vec::new();
    let mut wandb_step = None;
    for (field, wire) in Fields::new(data) {
        match (field, wire) {
            (1, Wire::Bytes(item)) => {
                let (key, json, number) = item_key(item);
                if let Some(v) = number.or_else(|| json.and_then(json_number)) {
                    items.push((key, v));
                }
            }
            (2, Wire::Bytes(step)) => {
                wandb_step = Fields::new(step).find_map(|(f, w)| match (f, w) {
                    (1, Wire::Varint(n)) => Some(n as f64),
                    _ => None,
                });
            }
            _ => {}
        }
    }
    let own = STEP_KEYS
        .iter()
        .find_map(|k| items.iter().find(|(key, _)| key == k).map(|(_, v)| *v));
    let from_row = || items.iter().find(|(k, _)| k == "_step").map(|(_, v)| *v);
    let Some(step) = own.or(wandb_step).or_else(from_row) else {
        return;
    };
    let step = to_step(step);
    for (key, v) in &items {
        if !key.starts_with('_') && !STEP_KEYS.contains(&key.as_str()) {
            run.push(key, step, *v);
        }
    }
}

/// The config's items as the run's arguments (LR, schedule, batch, steps).
fn config_items(run: &mut RawRun, data: &[u8]) {
    for (field, wire) in Fields::new(data) {
        let (1, Wire::Bytes(item)) = (field, wire) else {
            continue;
        };
        let (key, json, _) = item_key(item);
        let Some(value) = json.and_then(|j| serde_json::from_slice::<Value>(j).ok()) else {
            continue;
        };
        // A config.yaml-style item wraps its value ({"desc": ..., "value": ...}).
        let value = value.get("value").cloned().unwrap_or(value);
        if key == "max_steps" && run.hints.total_steps.is_none() {
            run.hints.total_steps = value.as_u64().filter(|s| *s > 0);
        }
        if let Some(text) = json_scalar(&value) {
            run.hints.setup.absorb(&key, &text, "W&B config");
        }
    }
}

impl Stream for WandbRun {
    fn feed(&mut self, run: &mut RawRun, data: &[u8], eof: bool) -> Result<usize, ReadError> {
        let mut at = 0;
        if self.taken == 0 {
            if data.len() < HEADER.len() {
                if eof {
                    return Err(self.corrupt(0, "truncated: shorter than the 7-byte W&B header"));
                }
                return Ok(0);
            }
            if data[..HEADER.len()] != HEADER {
                return Err(self.corrupt(0, "no W&B header (`:W&B`, magic 0xBEE1, version 0)"));
            }
            at = HEADER.len();
        }
        while let Some((record, next)) = self.next_record(data, at)? {
            self.record(run, &record);
            at = next;
        }
        if eof && at < data.len() && data[at..].iter().any(|b| *b != 0) {
            let cut = Partial::record_cut_short(&self.path, self.taken + at as u64, data.len() - at);
            run.hints.partial.push(cut);
        }
        self.taken += at as u64;
        Ok(at)
    }

    fn finish(&self, _run: &mut RawRun) {}
}
