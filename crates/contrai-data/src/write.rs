//! Output that appears only when complete: atomic files, and row writers for each format.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{RecordBatch, UInt32Array};
use parquet::arrow::ArrowWriter;
use tempfile::NamedTempFile;

use crate::error::{DataError, Result};
use crate::read::{Format, Raw, Source, delimiter, header_of, schema_of};

/// The temporary name's start and end: `.contrai-XXXXXX.tmp`.
const TMP_PREFIX: &str = ".contrai-";
const TMP_SUFFIX: &str = ".tmp";

/// A file written under a temporary name beside its destination, renamed into place on commit.
///
/// Dropped without commit (error, Ctrl-C unwinding), the temporary file is removed and the
/// destination keeps whatever it held before.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: NamedTempFile,
    dest: PathBuf,
}

impl AtomicFile {
    /// Starts a file that will become `dest`.
    pub fn create(dest: impl Into<PathBuf>) -> Result<AtomicFile> {
        let dest = dest.into();
        let dir = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| DataError::io(dir, e))?;
        let mut builder = tempfile::Builder::new();
        builder.prefix(TMP_PREFIX).suffix(TMP_SUFFIX);
        // Like any other file: 0666 less the umask (tempfile's default is private, 0600).
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let tmp = builder.tempfile_in(dir).map_err(|e| DataError::io(dir, e))?;
        Ok(AtomicFile { tmp, dest })
    }

    /// The temporary file's current path (readable before commit).
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// The final path.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// A second handle on the temporary file, for writers that own their file.
    pub fn handle(&self) -> Result<File> {
        self.tmp
            .as_file()
            .try_clone()
            .map_err(|e| DataError::io(&self.dest, e))
    }

    /// Flushes to disk and renames into place.
    pub fn commit(self) -> Result<()> {
        let dest = self.dest;
        self.tmp
            .as_file()
            .sync_all()
            .map_err(|e| DataError::io(&dest, e))?;
        self.tmp
            .persist(&dest)
            .map_err(|e| DataError::io(&dest, e.error))?;
        if let Some(dir) = dest.parent().filter(|p| !p.as_os_str().is_empty())
            && let Ok(d) = File::open(dir)
        {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// Removes the temporary files of [`AtomicFile`]s that were never committed (a writer killed
/// mid-write) in `dir` and its subdirectories down to `depth` levels; nothing else is touched.
/// Call it only while holding the directory's [`crate::DirLock`]: a live writer's file looks the
/// same. Returns the files removed.
pub fn remove_leftovers(dir: &Path, depth: usize) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(removed);
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if kind.is_file() && name.starts_with(TMP_PREFIX) && name.ends_with(TMP_SUFFIX) {
            std::fs::remove_file(&path).map_err(|e| DataError::io(&path, e))?;
            removed.push(path);
        } else if kind.is_dir() && depth > 0 {
            removed.extend(remove_leftovers(&path, depth - 1)?);
        }
    }
    removed.sort();
    Ok(removed)
}

/// Writes `bytes` to `dest` atomically.
pub fn write_atomic(dest: impl Into<PathBuf>, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(dest)?;
    let dest = f.dest.clone();
    f.tmp.write_all(bytes).map_err(|e| DataError::io(&dest, e))?;
    f.commit()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn atomic_files_get_the_same_mode_as_any_other_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain.txt");
        std::fs::write(&plain, b"x").unwrap();
        let atomic = dir.path().join("recipe.toml");
        write_atomic(&atomic, b"x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&atomic), mode(&plain), "the umask decides, as for any file");
    }

    #[test]
    fn leftovers_are_only_our_own_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("data/deep/deeper")).unwrap();
        let ours = [d.join(".contrai-a1B2c3.tmp"), d.join("data/.contrai-x.tmp")];
        let theirs = [
            d.join("notes.tmp"),
            d.join(".other-x.tmp"),
            d.join(".contrai-x.tmp.bak"),
            d.join("train.jsonl"),
            d.join("data/deep/deeper/.contrai-too-deep.tmp"),
        ];
        for p in ours.iter().chain(&theirs) {
            std::fs::write(p, b"x").unwrap();
        }
        // A directory named like a temporary file is not one.
        std::fs::create_dir(d.join(".contrai-dir.tmp")).unwrap();
        let removed = remove_leftovers(d, 1).unwrap();
        assert_eq!(removed, {
            let mut v = ours.to_vec();
            v.sort();
            v
        });
        assert!(ours.iter().all(|p| !p.exists()));
        assert!(theirs.iter().all(|p| p.exists()));
        assert!(d.join(".contrai-dir.tmp").is_dir());
    }
}
