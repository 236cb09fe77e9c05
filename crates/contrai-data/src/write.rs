//! Row writers for each format, into files that appear only when complete ([`AtomicFile`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{RecordBatch, UInt32Array};
use parquet::arrow::ArrowWriter;

use crate::error::{DataError, Result};
use crate::read::{Format, Raw, Source, delimiter, header_of, schema_of};

pub use contrai_base::atomic::{AtomicFile, remove_leftovers, write_atomic};

/// Writes rows back in their source's format.
pub enum RowWriter {
    /// JSONL lines, unchanged.
    Jsonl(BufWriter<File>, PathBuf),
    /// CSV or TSV records under the source's header.
    Csv(Box<csv::Writer<File>>, PathBuf),
    /// Parquet with the source's schema; rows of one input batch are gathered and taken at once.
    Parquet {
        /// The writer.
        writer: Box<ArrowWriter<File>>,
        /// Rows waiting from the current input batch.
        pending: Option<(Arc<RecordBatch>, Vec<u32>)>,
        /// Where it writes.
        path: PathBuf,
    },
}

impl RowWriter {
    /// A writer into `file` (named `path` in messages) for rows of `source`.
    pub fn new(file: File, path: &Path, source: &Source) -> Result<RowWriter> {
        let path = path.to_path_buf();
        Ok(match (source, source.format()) {
            (_, Format::Jsonl) => RowWriter::Jsonl(BufWriter::with_capacity(1 << 20, file), path),
            (
                Source::File {
                    path: input,
                    format,
                    columns,
                    ..
                },
                Format::Csv | Format::Tsv,
            ) => {
                // A headerless input's rows are written under a header of the names given, so
                // that the partitions describe themselves. TSV has no quoting to add.
                let header = header_of(input, *format, columns.as_deref())?;
                let quote = match format {
                    Format::Tsv => csv::QuoteStyle::Never,
                    _ => csv::QuoteStyle::Necessary,
                };
                let mut w = csv::WriterBuilder::new()
                    .delimiter(delimiter(*format))
                    .quote_style(quote)
                    .from_writer(file);
                w.write_record(&header).map_err(|e| csv_error(&path, e))?;
                RowWriter::Csv(Box::new(w), path)
            }
            (Source::File { path: input, .. }, Format::Parquet) => {
                let schema = schema_of(input)?;
                let writer = ArrowWriter::try_new(file, schema, None).map_err(|e| format_error(&path, e))?;
                RowWriter::Parquet {
                    writer: Box::new(writer),
                    pending: None,
                    path,
                }
            }
            (Source::Memory { .. }, _) => unreachable!("memory sources are JSONL"),
        })
    }

    /// Appends one row.
    pub fn write(&mut self, raw: &Raw) -> Result<()> {
        match (self, raw) {
            (RowWriter::Jsonl(w, path), Raw::Line(line)) => w
                .write_all(line.as_bytes())
                .and_then(|_| w.write_all(b"\n"))
                .map_err(|e| DataError::io(&*path, e)),
            (RowWriter::Csv(w, path), Raw::Csv(rec)) => w.write_record(rec).map_err(|e| csv_error(path, e)),
            (
                RowWriter::Parquet {
                    writer,
                    pending,
                    path,
                },
                Raw::Batch { batch, row },
            ) => {
                if pending.as_ref().is_some_and(|(b, _)| !Arc::ptr_eq(b, batch)) {
                    flush(writer, pending, path)?;
                }
                pending
                    .get_or_insert_with(|| (batch.clone(), Vec::new()))
                    .1
                    .push(*row as u32);
                Ok(())
            }
            (w, _) => Err(DataError::Param(format!(
                "row of another format written to {}",
                w.path().display()
            ))),
        }
    }

    fn path(&self) -> &Path {
        match self {
            RowWriter::Jsonl(_, p) | RowWriter::Csv(_, p) | RowWriter::Parquet { path: p, .. } => p,
        }
    }

    /// Flushes everything; the file is complete afterwards.
    pub fn finish(self) -> Result<()> {
        match self {
            RowWriter::Jsonl(mut w, path) => w.flush().map_err(|e| DataError::io(path, e)),
            RowWriter::Csv(mut w, path) => w.flush().map_err(|e| DataError::io(path, e)),
            RowWriter::Parquet {
                mut writer,
                mut pending,
                path,
            } => {
                flush(&mut writer, &mut pending, &path)?;
                writer.close().map(|_| ()).map_err(|e| format_error(&path, e))
            }
        }
    }
}

/// Writes the pending rows of one input batch.
fn flush(
    writer: &mut ArrowWriter<File>,
    pending: &mut Option<(Arc<RecordBatch>, Vec<u32>)>,
    path: &Path,
) -> Result<()> {
    if let Some((batch, rows)) = pending.take() {
        let taken = arrow_select::take::take_record_batch(&batch, &UInt32Array::from(rows))
            .map_err(|e| format_error(path, e))?;
        writer.write(&taken).map_err(|e| format_error(path, e))?;
    }
    Ok(())
}

fn csv_error(path: &Path, e: csv::Error) -> DataError {
    DataError::Format {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn format_error(path: &Path, e: impl std::fmt::Display) -> DataError {
    DataError::Format {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}
