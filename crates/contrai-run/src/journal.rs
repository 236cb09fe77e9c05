//! JSON-lines files (`metrics.jsonl`, `decisions.jsonl`): appended a row at a time as the run
//! goes, cut back to a checkpoint's length on resume, and read back with line numbers.

use std::fs::{File, OpenOptions};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{Result, RunError};

/// An open JSON-lines file.
#[derive(Debug)]
pub struct JsonLines {
    file: File,
    path: PathBuf,
    len: u64,
}

impl JsonLines {
    /// Opens `path` for appending after cutting it to `keep` bytes (0 starts afresh).
    pub fn open(path: &Path, keep: u64) -> Result<JsonLines> {
        let io = |e| RunError::io(path, e);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let found = file.metadata().map_err(io)?.len();
        if found < keep {
            return Err(RunError::Corrupt {
                path: path.to_path_buf(),
                message: format!("holds {found} bytes, fewer than the {keep} the checkpoint recorded"),
            });
        }
        file.set_len(keep).map_err(io)?;
        file.seek(std::io::SeekFrom::Start(keep)).map_err(io)?;
        Ok(JsonLines {
            file,
            path: path.to_path_buf(),
            len: keep,
        })
    }

    /// Appends one row and hands it to the OS.
    pub fn write<T: Serialize>(&mut self, row: &T) -> Result<()> {
        let mut line = serde_json::to_vec(row).map_err(|e| RunError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.flush())
            .map_err(|e| RunError::io(&self.path, e))?;
        self.len += line.len() as u64;
        Ok(())
    }

    /// Bytes written so far (what a checkpoint records).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forces the rows to disk (before a checkpoint refers to them).
    pub fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| RunError::io(&self.path, e))
    }
}

/// The rows of a JSON-lines file's first `upto` bytes (all of it when `None`), each parsed by
/// `parse`, with its 1-based line; a missing file has none. Errors name the file and line.
pub fn read_jsonl<T>(
    path: &Path,
    upto: Option<u64>,
    parse: impl Fn(&str) -> std::result::Result<T, String>,
) -> Result<Vec<(usize, T)>> {
    let text = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RunError::io(path, e)),
    };
    let end = upto.map_or(text.len(), |n| (n as usize).min(text.len()));
    let text = String::from_utf8_lossy(&text[..end]);
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            parse(l).map(|row| (i + 1, row)).map_err(|message| RunError::Row {
                path: path.to_path_buf(),
                line: i + 1,
                message,
            })
        })
        .collect()
}

/// [`read_jsonl`] for rows with a serde form.
pub fn read_rows<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<(usize, T)>> {
    read_jsonl(path, None, |l| serde_json::from_str(l).map_err(|e| explain(&e)))
}

/// A serde_json error in words: broken JSON, or JSON that is not the row expected.
fn explain(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof => format!("invalid JSON: {e}"),
        _ => format!("not a row of this file: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_append_cut_back_and_read_with_line_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.jsonl");
        let mut j = JsonLines::open(&p, 0).unwrap();
        j.write(&serde_json::json!({"a": 1})).unwrap();
        let keep = j.len();
        j.write(&serde_json::json!({"a": 2})).unwrap();
        drop(j);
        let mut j = JsonLines::open(&p, keep).unwrap();
        j.write(&serde_json::json!({"a": 3})).unwrap();
        let rows: Vec<(usize, serde_json::Value)> = read_rows(&p).unwrap();
        assert_eq!(
            rows.iter()
                .map(|r| r.1["a"].as_i64().unwrap())
                .collect::<Vec<_>>(),
            [1, 3]
        );
        assert!(
            JsonLines::open(&p, 1000).is_err(),
            "shorter than the checkpoint says"
        );
        std::fs::write(&p, "{\"a\": 1}\nnot json\n").unwrap();
        let e = read_rows::<serde_json::Value>(&p).unwrap_err().to_string();
        assert!(e.contains("m.jsonl:2: invalid JSON"), "{e}");
        assert!(
            read_rows::<serde_json::Value>(&dir.path().join("none"))
                .unwrap()
                .is_empty()
        );
    }
}
