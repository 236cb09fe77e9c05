//! CSV and TSV, with a header row or with the columns' names given; every row must have as many
//! fields as there are names. TSV is read as IANA defines it: no quoting, so a double quote is a
//! character like any other and a row is exactly one line.

use std::fs::File;
use std::path::{Path, PathBuf};

use csv::{ErrorKind, StringRecord};

use super::{FieldSpec, Format, Raw, Record, Records, row_error};
use crate::error::{DataError, Result};

/// The field delimiter of a delimited format.
pub(crate) fn delimiter(format: Format) -> u8 {
    match format {
        Format::Tsv => b'\t',
        _ => b',',
    }
}

/// A reader of `path` as `format`; `header`: its first line names the columns.
fn reader(path: &Path, format: Format, header: bool) -> Result<csv::Reader<File>> {
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    Ok(csv::ReaderBuilder::new()
        .delimiter(delimiter(format))
        .quoting(format != Format::Tsv)
        .has_headers(header)
        // Without a header, rows are checked against the names given instead.
        .flexible(!header)
        .buffer_capacity(1 << 20)
        .from_reader(file))
}

/// The header row of a CSV/TSV file (or the names given for a headerless one), for writing
/// rows back.
pub(crate) fn header_of(path: &Path, format: Format, columns: Option<&[String]>) -> Result<StringRecord> {
    if let Some(names) = columns {
        return Ok(StringRecord::from(names.to_vec()));
    }
    let mut r = reader(path, format, true)?;
    Ok(r.headers().map_err(|e| convert(path, e, 1))?.clone())
}

/// Opens a CSV/TSV file as a stream of records.
pub(super) fn open(
    path: &Path,
    format: Format,
    columns: Option<&[String]>,
    fields: &FieldSpec,
) -> Result<Records> {
    let header = header_of(path, format, columns)?;
    if header.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    let names: Vec<String> = header.iter().map(str::to_string).collect();
    let [text, label, id] = fields.resolve(path, &names)?.positions(&names);
    let mut reader = reader(path, format, columns.is_none())?;
    if columns.is_none() {
        reader.headers().map_err(|e| convert(path, e, 1))?;
    }
    Ok(Box::new(Rows {
        path: path.to_path_buf(),
        reader,
        cols: [
            text.expect("text column resolved"),
            label.unwrap_or(usize::MAX),
            id.unwrap_or(usize::MAX),
        ],
        named: columns.map(|c| c.to_vec()),
        last_byte: 0,
        yielded: false,
        done: false,
    }))
}

/// Iterates over the data rows.
struct Rows {
    path: PathBuf,
    reader: csv::Reader<File>,
    cols: [usize; 3],
    /// The names given for a headerless file (each row must have that many fields).
    named: Option<Vec<String>>,
    last_byte: u64,
    yielded: bool,
    done: bool,
}

impl Iterator for Rows {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut rec = StringRecord::new();
        match self.reader.read_record(&mut rec) {
            Ok(false) => {
                self.done = true;
                (!self.yielded).then(|| {
                    Err(DataError::Empty {
                        path: self.path.clone(),
                    })
                })
            }
            Ok(true) => {
                self.yielded = true;
                let pos = rec.position().cloned().unwrap_or_else(csv::Position::new);
                let progress = pos.byte().saturating_sub(self.last_byte);
                self.last_byte = pos.byte();
                if let Some(names) = self.named.as_ref().filter(|n| n.len() != rec.len()) {
                    let message = format!(
                        "the row has {} fields, the columns given name {} ({})",
                        rec.len(),
                        names.len(),
                        names.join(", ")
                    );
                    return Some(Err(row_error(&self.path, pos.line(), message)));
                }
                let get = |i: usize| rec.get(i).filter(|s| !s.is_empty()).map(str::to_string);
                Some(Ok(Record {
                    line: pos.line(),
                    id: get(self.cols[2]).unwrap_or_else(|| pos.line().to_string()),
                    text: rec.get(self.cols[0]).map(str::to_string),
                    label: get(self.cols[1]),
                    raw: Raw::Csv(rec),
                    progress,
                }))
            }
            Err(e) => {
                self.yielded = true;
                let line = e.position().map_or(0, |p| p.line());
                let err = convert(&self.path, e, line);
                if !err.is_row_error() {
                    self.done = true;
                }
                Some(Err(err))
            }
        }
    }
}

/// Maps a csv error to a row error (bad row) or an I/O error (stop).
fn convert(path: &Path, e: csv::Error, line: u64) -> DataError {
    match e.into_kind() {
        ErrorKind::Io(io) => DataError::io(path, io),
        ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => row_error(
            path,
            line,
            format!("the row has {len} fields, the header has {expected_len}"),
        ),
        ErrorKind::Utf8 { err, .. } => row_error(
            path,
            line,
            format!("field {} is not valid UTF-8", err.field() + 1),
        ),
        other => row_error(path, line, format!("{other:?}")),
    }
}
