//! JSONL: one JSON object a line; blank lines are skipped.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Turns raw lines into records, checking the fields on the first object.
struct Parser<I> {
    path: PathBuf,
    fields: FieldSpec,
    lines: I,
    line: u64,
    columns: Option<Columns>,
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
            yielded: false,
            done: false,
        }
    }

    /// Parses one non-blank line.
    fn parse(&mut self, bytes: Vec<u8>) -> Result<Record> {
        let progress = bytes.len() as u64;
        let mut line = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            row_error(
                &self.path,
                self.line,
                format!("not valid UTF-8 (at byte {at} of the line)"),
            )
        })?;
        while line.ends_with(['\n', '\r']) {
            line.pop();
        }
        let obj: Map<String, Value> = serde_json::from_str(&line).map_err(|e| {
            let what = if e.is_data() {
                "expected a JSON object".to_string()
            } else {
                format!("invalid JSON: {e}")
            };
            row_error(&self.path, self.line, what)
        })?;
        let columns = match &self.columns {
            Some(c) => c.clone(),
            None => {
                let found: Vec<String> = obj.keys().cloned().collect();
                let c = self.fields.resolve(&self.path, &found)?;
                self.columns = Some(c.clone());
                c
            }
        };
        let text = self.field(&obj, Some(&columns.text), "text")?;
        let label = self.field(&obj, columns.label.as_ref(), "label")?;
        let id = self.field(&obj, columns.id.as_ref(), "id")?;
        Ok(Record {
            line: self.line,
            id: id.unwrap_or_else(|| self.line.to_string()),
            text,
            label,
            raw: Raw::Line(line),
            progress,
        })
    }

    /// Reads one field as a string: numbers and booleans as written, null or absent as `None`.
    fn field(&self, obj: &Map<String, Value>, name: Option<&String>, role: &str) -> Result<Option<String>> {
        let Some(name) = name else { return Ok(None) };
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
            Some(other) => Err(row_error(
                &self.path,
                self.line,
                format!("field `{name}` ({role}) must be a string, found {}", kind(other)),
            )),
        }
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
        loop {
            let Some(bytes) = self.lines.next() else {
                self.done = true;
                return (!self.yielded).then(|| {
                    Err(DataError::Empty {
                        path: self.path.clone(),
                    })
                });
            };
            self.line += 1;
            let bytes = match bytes {
                Ok(b) => b,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if bytes.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            self.yielded = true;
            let rec = self.parse(bytes);
            if let Err(e) = &rec
                && !e.is_row_error()
            {
                self.done = true;
            }
            return Some(rec);
        }
    }
}
