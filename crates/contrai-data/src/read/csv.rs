//! CSV and TSV, with a header row or with the columns' names given; every row must have as many
//! fields as there are names. TSV is read as IANA defines it: no quoting, so a double quote is a
//! character like any other and a row is exactly one line.
//!
//! A CSV quote that is never closed would make the rest of the file one field. The bytes pass a
//! [`QuoteGuard`] on their way to the parser: a quoted field that runs past [`QuotedField`]'s
//! limits, or to the end of the file, is an error naming the line where the quote opened, and the
//! rows after that line are read again from there (with `--skip-bad`, that row is skipped and
//! counted; without it, the read stops on it).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use csv::{ErrorKind, StringRecord};

use super::{FieldSpec, Format, Raw, Record, Records, row_error};
use crate::error::{DataError, Result};

/// How far a quoted CSV field may run before it is taken for a quote never closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotedField {
    /// Lines it may span.
    pub lines: u64,
    /// Bytes it may hold.
    pub bytes: u64,
}

impl Default for QuotedField {
    fn default() -> Self {
        QuotedField {
            lines: 1_000,
            bytes: 1 << 20,
        }
    }
}

/// The field delimiter of a delimited format.
pub(crate) fn delimiter(format: Format) -> u8 {
    match format {
        Format::Tsv => b'\t',
        _ => b',',
    }
}

/// The bytes of `path` from `start` (its `line`), through a quote guard where the format quotes.
fn guarded(
    path: &Path,
    format: Format,
    start: u64,
    line: u64,
    limit: QuotedField,
) -> Result<QuoteGuard<File>> {
    let mut file = File::open(path).map_err(|e| DataError::io(path, e))?;
    if start > 0 {
        file.seek(SeekFrom::Start(start))
            .map_err(|e| DataError::io(path, e))?;
    }
    Ok(QuoteGuard::new(
        file,
        delimiter(format),
        format != Format::Tsv,
        start,
        line,
        limit,
    ))
}

/// A csv reader over `input`; `header`: its first line names the columns. Field counts are
/// checked by [`Rows`] (a reader resumed after a broken quote starts mid-file).
fn reader<R: Read>(input: R, format: Format, header: bool) -> csv::Reader<R> {
    csv::ReaderBuilder::new()
        .delimiter(delimiter(format))
        .quoting(format != Format::Tsv)
        .has_headers(header)
        .flexible(true)
        .buffer_capacity(1 << 20)
        .from_reader(input)
}

/// The header row of a CSV/TSV file (or the names given for a headerless one), for writing
/// rows back.
pub(crate) fn header_of(path: &Path, format: Format, columns: Option<&[String]>) -> Result<StringRecord> {
    if let Some(names) = columns {
        return Ok(StringRecord::from(names.to_vec()));
    }
    let input = guarded(path, format, 0, 1, QuotedField::default())?;
    let mut r = reader(input, format, true);
    Ok(r.headers().map_err(|e| convert(path, e, 1))?.clone())
}

/// Opens a CSV/TSV file as a stream of records.
pub(super) fn open(
    path: &Path,
    format: Format,
    columns: Option<&[String]>,
    fields: &FieldSpec,
    limit: QuotedField,
) -> Result<Records> {
    let header = header_of(path, format, columns)?;
    if header.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    let names: Vec<String> = header.iter().map(str::to_string).collect();
    let [text, label, id] = fields.resolve(path, &names)?.positions(&names);
    let mut reader = reader(guarded(path, format, 0, 1, limit)?, format, columns.is_none());
    if columns.is_none() {
        reader.headers().map_err(|e| convert(path, e, 1))?;
    }
    Ok(Box::new(Rows {
        path: path.to_path_buf(),
        format,
        limit,
        reader: Some(reader),
        cols: [
            text.expect("text column resolved"),
            label.unwrap_or(usize::MAX),
            id.unwrap_or(usize::MAX),
        ],
        width: names.len(),
        named: columns.map(|c| c.to_vec()),
        base: (0, 0),
        resume: None,
        last_byte: 0,
        yielded: false,
        done: false,
    }))
}

/// Iterates over the data rows.
struct Rows {
    path: PathBuf,
    format: Format,
    limit: QuotedField,
    reader: Option<csv::Reader<QuoteGuard<File>>>,
    cols: [usize; 3],
    /// Fields a row must have.
    width: usize,
    /// The names given for a headerless file.
    named: Option<Vec<String>>,
    /// Byte offset and line (less one) where the current reader started.
    base: (u64, u64),
    /// Where to read on after a broken quote: the line after the one it opened on.
    resume: Option<Place>,
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
        if let Some((start, line)) = self.resume.take() {
            match guarded(&self.path, self.format, start, line, self.limit) {
                Ok(g) => {
                    self.reader = Some(reader(g, self.format, false));
                    self.base = (start, line - 1);
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        let reader = self.reader.as_mut()?;
        let mut rec = StringRecord::new();
        match reader.read_record(&mut rec) {
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
                let (byte, line) = (self.base.0 + pos.byte(), self.base.1 + pos.line());
                let progress = byte.saturating_sub(self.last_byte);
                self.last_byte = byte;
                if rec.len() != self.width {
                    let message = match &self.named {
                        Some(names) => format!(
                            "the row has {} fields, the columns given name {} ({})",
                            rec.len(),
                            names.len(),
                            names.join(", ")
                        ),
                        None => format!("the row has {} fields, the header has {}", rec.len(), self.width),
                    };
                    return Some(Err(row_error(&self.path, line, message)));
                }
                let get = |i: usize| rec.get(i).filter(|s| !s.is_empty()).map(str::to_string);
                Some(Ok(Record {
                    line,
                    id: get(self.cols[2]).unwrap_or_else(|| line.to_string()),
                    text: rec.get(self.cols[0]).map(str::to_string),
                    label: get(self.cols[1]),
                    raw: Raw::Csv(rec),
                    progress,
                }))
            }
            Err(e) => {
                self.yielded = true;
                let line = e.position().map_or(0, |p| self.base.1 + p.line());
                if let Some(broken) = unclosed(&e) {
                    // The row is lost; the rows after the line where its quote opened are not.
                    self.reader = None;
                    self.resume = broken.next_line;
                    self.done = broken.next_line.is_none();
                    return Some(Err(row_error(
                        &self.path,
                        broken.line,
                        broken.describe(&self.limit),
                    )));
                }
                let err = convert(&self.path, e, line);
                if !err.is_row_error() {
                    self.done = true;
                }
                Some(Err(err))
            }
        }
    }
}

/// The broken quote behind a csv error, if it is one.
fn unclosed(e: &csv::Error) -> Option<Unclosed> {
    match e.kind() {
        ErrorKind::Io(io) => io.get_ref()?.downcast_ref::<Unclosed>().copied(),
        _ => None,
    }
}

/// Maps a csv error to a row error (bad row) or an I/O error (stop).
fn convert(path: &Path, e: csv::Error, line: u64) -> DataError {
    if let Some(broken) = unclosed(&e) {
        return row_error(path, broken.line, broken.describe(&QuotedField::default()));
    }
    match e.into_kind() {
        ErrorKind::Io(io) => DataError::io(path, io),
        ErrorKind::Utf8 { err, .. } => row_error(
            path,
            line,
            format!("field {} is not valid UTF-8", err.field() + 1),
        ),
        other => row_error(path, line, format!("{other:?}")),
    }
}

/// A quote that opened and did not close in time.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("a quoted field opened at line {line} is not closed")]
struct Unclosed {
    /// The line where it opened.
    line: u64,
    /// Where the line after it starts (none when the file ends on that line).
    next_line: Option<Place>,
    /// What it ran into.
    ran: Ran,
}

/// How far an unclosed quote ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ran {
    EndOfFile,
    Lines,
    Bytes,
}

impl Unclosed {
    fn describe(&self, limit: &QuotedField) -> String {
        let ran = match self.ran {
            Ran::EndOfFile => "runs to the end of the file".to_string(),
            Ran::Lines => format!("runs past {} lines", limit.lines),
            Ran::Bytes => format!("runs past {} bytes", limit.bytes),
        };
        format!(
            "a quoted field opens on this line and {ran} without its closing quote (\"); the rows after this line are read on (--skip-bad skips this one; --max-field-lines and --max-field-bytes set the limits)"
        )
    }
}

/// A byte offset in a file and the line it is on.
type Place = (u64, u64);

/// A quote the guard saw open.
#[derive(Debug, Clone, Copy)]
struct Open {
    /// Its line and byte offset.
    line: u64,
    offset: u64,
    /// Where the line after it starts, once seen.
    next_line: Option<Place>,
}

/// Where the guard is in the CSV grammar (csv-core's, quotes only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    FieldStart,
    Unquoted,
    Quoted,
    QuoteInQuoted,
}

/// The bytes of a CSV file as they reach the parser, with their quoting followed: a quoted field
/// past the limits, or open at the end of the file, fails the read with [`Unclosed`].
struct QuoteGuard<R> {
    inner: R,
    delimiter: u8,
    quoting: bool,
    state: State,
    /// Byte offset of the next byte, and its line.
    offset: u64,
    line: u64,
    /// The quote open now, if any.
    open: Option<Open>,
    limit: QuotedField,
    failed: Option<Unclosed>,
}

impl<R: Read> QuoteGuard<R> {
    fn new(inner: R, delimiter: u8, quoting: bool, offset: u64, line: u64, limit: QuotedField) -> Self {
        QuoteGuard {
            inner,
            delimiter,
            quoting,
            state: State::FieldStart,
            offset,
            line,
            open: None,
            limit,
            failed: None,
        }
    }

    /// Follows one byte; an unclosed quote past the limits is returned.
    fn follow(&mut self, b: u8) -> Option<Unclosed> {
        let ends_field = b == self.delimiter || b == b'\n' || b == b'\r';
        self.state = match (self.state, b) {
            (State::FieldStart, b'"') => {
                self.open = Some(Open {
                    line: self.line,
                    offset: self.offset,
                    next_line: None,
                });
                State::Quoted
            }
            (State::Quoted, b'"') => State::QuoteInQuoted,
            (State::Quoted, _) => State::Quoted,
            (State::QuoteInQuoted, b'"') => State::Quoted,
            (_, _) if ends_field => State::FieldStart,
            _ => State::Unquoted,
        };
        if b == b'\n' {
            self.line += 1;
            if let Some(open) = self.open.as_mut().filter(|o| o.next_line.is_none()) {
                open.next_line = Some((self.offset + 1, self.line));
            }
        }
        self.offset += 1;
        if !matches!(self.state, State::Quoted | State::QuoteInQuoted) {
            self.open = None;
            return None;
        }
        let open = self.open?;
        let ran = if self.line - open.line >= self.limit.lines {
            Ran::Lines
        } else if self.offset - open.offset > self.limit.bytes {
            Ran::Bytes
        } else {
            return None;
        };
        Some(Unclosed {
            line: open.line,
            next_line: open.next_line,
            ran,
        })
    }
}

impl<R: Read> Read for QuoteGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(f) = self.failed.take() {
            return Err(std::io::Error::other(f));
        }
        let n = self.inner.read(buf)?;
        if !self.quoting {
            return Ok(n);
        }
        if n == 0 {
            return match (self.state, self.open) {
                (State::Quoted, Some(open)) => Err(std::io::Error::other(Unclosed {
                    line: open.line,
                    next_line: open.next_line,
                    ran: Ran::EndOfFile,
                })),
                _ => Ok(0),
            };
        }
        for (i, &b) in buf[..n].iter().enumerate() {
            if let Some(broken) = self.follow(b) {
                // What came before reaches the parser; the next read fails.
                self.failed = Some(broken);
                return if i > 0 {
                    Ok(i)
                } else {
                    Err(std::io::Error::other(broken))
                };
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(bytes: &[u8], limit: QuotedField) -> (Vec<u8>, Option<Unclosed>) {
        let mut g = QuoteGuard::new(bytes, b',', true, 0, 1, limit);
        let mut out = Vec::new();
        let mut buf = [0u8; 7];
        loop {
            match g.read(&mut buf) {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => {
                    return (
                        out,
                        e.get_ref().and_then(|x| x.downcast_ref::<Unclosed>()).copied(),
                    );
                }
            }
        }
    }

    #[test]
    fn closed_quotes_pass_whatever_they_hold() {
        let csv = b"id,text\n1,\"a, \"\"quoted\"\"\nline\"\n2,plain \"inner\" quote\n3,\"\"\n";
        let (out, err) = run(csv, QuotedField::default());
        assert_eq!(out, csv);
        assert!(err.is_none());
    }

    #[test]
    fn a_quote_open_at_the_end_names_its_line_and_the_next() {
        let csv = b"id,text\n1,ok\n2,\"never closed\n3,next\n4,last\n";
        let (_, err) = run(csv, QuotedField::default());
        let e = err.expect("unclosed");
        assert_eq!((e.line, e.ran), (3, Ran::EndOfFile));
        assert_eq!(e.next_line, Some((29, 4)));
        assert_eq!(&csv[29..35], b"3,next");
    }

    #[test]
    fn a_quote_past_the_line_limit_fails_before_the_end() {
        let mut csv = b"id,text\n1,\"open".to_vec();
        for i in 0..20 {
            csv.extend_from_slice(format!("\n{i},row").as_bytes());
        }
        csv.extend_from_slice(b"\"\n");
        let limit = QuotedField {
            lines: 5,
            bytes: 1 << 20,
        };
        let (out, err) = run(&csv, limit);
        let e = err.expect("past the limit");
        assert_eq!((e.line, e.ran), (2, Ran::Lines));
        assert!(out.len() < csv.len());
        let limit = QuotedField {
            lines: 1000,
            bytes: 20,
        };
        assert_eq!(run(&csv, limit).1.map(|e| e.ran), Some(Ran::Bytes));
    }
}
