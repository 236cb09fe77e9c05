//! JSONL: one JSON object a line; blank lines are skipped.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

use serde_json::{Map, Value};

use super::{Columns, FieldSpec, Raw, Record, Records, row_error};
use crate::error::{DataError, Result};

/// Opens a JSONL file as a stream of records.
pub(super) fn open(path: &Path, fields: &FieldSpec) -> Result<Records> {
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let lines = ByteLines {
        reader: BufReader::with_capacity(1 << 20, file),
        path: path.to_path_buf(),
    };
    Ok(Box::new(Parser::new(path.to_path_buf(), fields, lines)))
}

/// Parses JSONL lines held in memory.
pub(super) fn from_lines(name: &str, lines: Arc<Vec<String>>, fields: &FieldSpec) -> Records {
    let iter = (0..lines.len()).map(move |i| Ok(lines[i].clone().into_bytes()));
    Box::new(Parser::new(PathBuf::from(name), fields, iter))
}

/// Reads raw lines (without the terminator) from a file.
struct ByteLines {
    reader: BufReader<File>,
    path: PathBuf,
}

impl Iterator for ByteLines {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut buf = Vec::new();
        match self.reader.read_until(b'\n', &mut buf) {
            Ok(0) => None,
            Ok(_) => Some(Ok(buf)),
            Err(e) => Some(Err(DataError::io(&self.path, e))),
        }
    }
}

/// Lines parsed together, in parallel, once the fields are known.
const BATCH: usize = 512;

/// Turns raw lines into records: the first object fixes which fields exist, then lines are
/// parsed in parallel batches (JSON decoding is most of a reader's work).
struct Parser<I> {
    path: PathBuf,
    fields: FieldSpec,
    lines: I,
    line: u64,
    columns: Option<Columns>,
    pending: VecDeque<Result<Record>>,
    yielded: bool,
    done: bool,
}

impl<I: Iterator<Item = Result<Vec<u8>>>> Parser<I> {
    fn new(path: PathBuf, fields: &FieldSpec, lines: I) -> Self {
        Parser {
            path,
            fields: fields.clone(),
            lines,
            line: 0,
            columns: None,
            pending: VecDeque::new(),
            yielded: false,
            done: false,
        }
    }

    /// Reads up to [`BATCH`] non-blank lines and queues their records (or errors) in order.
    fn fill(&mut self) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut fatal = None;
        while batch.len() < BATCH {
            match self.lines.next() {
                None => break,
                Some(Err(e)) => {
                    fatal = Some(e);
                    break;
                }
                Some(Ok(bytes)) => {
                    self.line += 1;
                    if !bytes.iter().all(|b| b.is_ascii_whitespace()) {
                        batch.push((self.line, bytes));
                    }
                }
            }
        }
        let mut rest = batch.into_iter();
        // Until one object has been read, lines are taken one at a time: it fixes the fields.
        while self.columns.is_none() {
            let Some((line, bytes)) = rest.next() else { break };
            let rec = decode(&self.path, line, bytes).and_then(|(obj, text)| {
                let found: Vec<String> = obj.keys().cloned().collect();
                let columns = self.fields.resolve(&self.path, &found)?;
                let rec = record(&self.path, &columns, line, obj, text);
                self.columns = Some(columns);
                rec
            });
            self.pending.push_back(rec);
        }
        if let Some(columns) = &self.columns {
            let path = &self.path;
            let rest: Vec<(u64, Vec<u8>)> = rest.collect();
            let parsed: Vec<Result<Record>> = rest
                .into_par_iter()
                .map(|(line, bytes)| {
                    decode(path, line, bytes).and_then(|(obj, text)| record(path, columns, line, obj, text))
                })
                .collect();
            self.pending.extend(parsed);
        }
        self.pending.extend(fatal.map(Err));
    }
}

/// Decodes one line: UTF-8, then a JSON object; also returns the line without its terminator.
fn decode(path: &Path, line: u64, bytes: Vec<u8>) -> Result<(Map<String, Value>, String)> {
    let mut text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        row_error(path, line, format!("not valid UTF-8 (at byte {at} of the line)"))
    })?;
    while text.ends_with(['\n', '\r']) {
        text.pop();
    }
    let obj: Map<String, Value> = serde_json::from_str(&text).map_err(|e| {
        let what = if e.is_data() {
            "expected a JSON object".to_string()
        } else {
            format!("invalid JSON: {e}")
        };
        row_error(path, line, what)
    })?;
    Ok((obj, text))
}

/// Builds a record from a decoded object.
fn record(path: &Path, columns: &Columns, line: u64, obj: Map<String, Value>, raw: String) -> Result<Record> {
    let get = |name: Option<&String>, role: &str| field(path, line, &obj, name, role);
    let text = get(Some(&columns.text), "text")?;
    let label = get(columns.label.as_ref(), "label")?;
    let id = get(columns.id.as_ref(), "id")?;
    Ok(Record {
        line,
        id: id.unwrap_or_else(|| line.to_string()),
        text,
        label,
        progress: raw.len() as u64 + 1,
        raw: Raw::Line(raw),
    })
}

/// Reads one field as a string: numbers and booleans as written, an array of numbers as compact
/// JSON (numeric features), null or absent as `None`.
fn field(
    path: &Path,
    line: u64,
    obj: &Map<String, Value>,
    name: Option<&String>,
    role: &str,
) -> Result<Option<String>> {
    let Some(name) = name else { return Ok(None) };
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
        Some(v @ Value::Array(a)) if a.iter().all(Value::is_number) => Ok(Some(v.to_string())),
        Some(other) => Err(row_error(
            path,
            line,
            format!(
                "field `{name}` ({role}) must be a string (or an array of numbers), found {}",
                kind(other)
            ),
        )),
    }
}

/// A JSON value's kind, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<I: Iterator<Item = Result<Vec<u8>>>> Iterator for Parser<I> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.pending.is_empty() {
            self.fill();
        }
        let Some(rec) = self.pending.pop_front() else {
            self.done = true;
            return (!self.yielded).then(|| {
                Err(DataError::Empty {
                    path: self.path.clone(),
                })
            });
        };
        self.yielded = true;
        if let Err(e) = &rec
            && !e.is_row_error()
        {
            self.done = true;
        }
        Some(rec)
    }
}
