//! Streaming readers for JSONL, CSV, TSV and Parquet: one [`Record`] a row, errors with file and
//! line.

mod csv;
mod jsonl;
mod parquet;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;

use crate::error::{DataError, Result};

pub use contrai_base::data_choices::{FORMATS, Format};

/// Tells a file's format from its extension.
pub fn detect(path: &Path) -> Result<Format> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    Format::from_extension(&ext).ok_or_else(|| DataError::UnknownFormat {
        path: path.to_path_buf(),
        ext,
    })
}

/// Which fields hold each sample's text, label and id.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FieldSpec {
    /// The text field (required).
    pub text: String,
    /// The label field; `None` reads no labels.
    pub label: Option<String>,
    /// The id field; `None` numbers the rows instead.
    pub id: Option<String>,
    /// When false, a missing label or id field is silently ignored (the defaults are guesses).
    pub explicit: bool,
}

impl Default for FieldSpec {
    fn default() -> Self {
        FieldSpec {
            text: "text".into(),
            label: Some("label".into()),
            id: Some("id".into()),
            explicit: false,
        }
    }
}

impl FieldSpec {
    /// Picks the fields among those `found`, or says which required one is missing.
    fn resolve(&self, path: &Path, found: &[String]) -> Result<Columns> {
        let missing = |role: &'static str, field: &str| DataError::MissingField {
            path: path.to_path_buf(),
            role,
            field: field.to_string(),
            found: found.join(", "),
        };
        if !found.contains(&self.text) {
            return Err(missing("text", &self.text));
        }
        let optional = |role: &'static str, name: &Option<String>| match name {
            Some(n) if found.contains(n) => Ok(Some(n.clone())),
            Some(n) if self.explicit => Err(missing(role, n)),
            _ => Ok(None),
        };
        Ok(Columns {
            text: self.text.clone(),
            label: optional("label", &self.label)?,
            id: optional("id", &self.id)?,
        })
    }
}

/// The text, label and id fields that exist in a file.
#[derive(Debug, Clone)]
struct Columns {
    text: String,
    label: Option<String>,
    id: Option<String>,
}

impl Columns {
    /// Positions of the fields among `names` (all present, by construction).
    fn positions(&self, names: &[String]) -> [Option<usize>; 3] {
        let pos = |n: &Option<String>| n.as_ref().and_then(|n| names.iter().position(|x| x == n));
        [pos(&Some(self.text.clone())), pos(&self.label), pos(&self.id)]
    }
}

/// One row of a dataset: what the audit needs, and the raw row to write it back unchanged.
#[derive(Debug, Clone)]
pub struct Record {
    /// 1-based line (JSONL, CSV) or row (Parquet) number.
    pub line: u64,
    /// The id field, or the line number when there is none.
    pub id: String,
    /// The text; `None` when the field is absent or null in this row.
    pub text: Option<String>,
    /// The label; `None` when absent, null, or not read.
    pub label: Option<String>,
    /// The row as read, for writing it back in its own format.
    pub raw: Raw,
    /// Progress units this row stands for (bytes for text formats, 1 for Parquet).
    pub progress: u64,
}

/// A row as it was read.
#[derive(Debug, Clone)]
pub enum Raw {
    /// A JSONL line without its line terminator.
    Line(String),
    /// A CSV record.
    Csv(::csv::StringRecord),
    /// A row of a Parquet record batch.
    Batch {
        /// The batch the row belongs to.
        batch: Arc<RecordBatch>,
        /// The row within the batch.
        row: usize,
    },
}

/// Where rows come from: a file, or JSONL lines held in memory (the built-in demo).
#[derive(Debug, Clone)]
pub enum Source {
    /// A file in a known format.
    File {
        /// The file.
        path: PathBuf,
        /// Its format.
        format: Format,
        /// A CSV/TSV file without a header row: its columns' names, in order (`None`: the
        /// first line names them).
        columns: Option<Vec<String>>,
        /// How far a quoted CSV field may run before it is taken for a quote never closed.
        quoted: QuotedField,
    },
    /// JSONL lines in memory, shown under `name`.
    Memory {
        /// A display name such as `<demo>`.
        name: String,
        /// The JSONL lines.
        lines: Arc<Vec<String>>,
    },
}

/// A boxed stream of records.
pub type Records = Box<dyn Iterator<Item = Result<Record>> + Send>;

impl Source {
    /// A file in a known format, read with the defaults (a header row; quoted fields within
    /// the default limits): what a split writes.
    pub fn of_format(path: impl Into<PathBuf>, format: Format) -> Source {
        Source::File {
            path: path.into(),
            format,
            columns: None,
            quoted: QuotedField::default(),
        }
    }

    /// A file source, its format taken from `format` or else from the extension.
    pub fn file(path: impl Into<PathBuf>, format: Option<Format>) -> Result<Source> {
        let path = path.into();
        let format = match format {
            Some(f) => f,
            None => detect(&path)?,
        };
        Ok(Source::of_format(path, format))
    }

    /// This source with a quoted CSV field allowed to run as far as `limit` says.
    pub fn quoted_field(self, limit: QuotedField) -> Source {
        match self {
            Source::File {
                path,
                format,
                columns,
                ..
            } => Source::File {
                path,
                format,
                columns,
                quoted: limit,
            },
            memory => memory,
        }
    }

    /// This source read as a file without a header row whose columns are named `columns`, in
    /// order (CSV and TSV only; an empty list changes nothing).
    pub fn headerless(self, columns: &[String]) -> Result<Source> {
        if columns.is_empty() {
            return Ok(self);
        }
        match self {
            Source::File {
                path, format, quoted, ..
            } if format.is_delimited() => {
                let mut seen = std::collections::HashSet::new();
                if let Some(dup) = columns.iter().find(|c| !seen.insert(c.as_str())) {
                    return Err(DataError::Param(format!(
                        "column `{dup}` is named twice in the columns"
                    )));
                }
                Ok(Source::File {
                    path,
                    format,
                    columns: Some(columns.to_vec()),
                    quoted,
                })
            }
            other => Err(DataError::Param(format!(
                "{}: column names apply to CSV and TSV files without a header row; this one is {}",
                other.name(),
                other.format().extension()
            ))),
        }
    }

    /// The format rows are written back in.
    pub fn format(&self) -> Format {
        match self {
            Source::File { format, .. } => *format,
            Source::Memory { .. } => Format::Jsonl,
        }
    }

    /// The path or name shown in messages.
    pub fn name(&self) -> String {
        match self {
            Source::File { path, .. } => path.display().to_string(),
            Source::Memory { name, .. } => name.clone(),
        }
    }

    /// xxh3-128 of a file's bytes, read in blocks; `None` for data held in memory.
    pub fn file_digest(&self) -> Result<Option<u128>> {
        let Source::File { path, .. } = self else {
            return Ok(None);
        };
        let mut file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut block = vec![0u8; 1 << 20];
        loop {
            match std::io::Read::read(&mut file, &mut block) {
                Ok(0) => return Ok(Some(hasher.digest128())),
                Ok(n) => hasher.update(&block[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(DataError::io(path, e)),
            }
        }
    }

    /// The names of the fields: a CSV/TSV header (or the columns given), a Parquet schema, the
    /// keys of the first JSONL row, sorted.
    pub fn field_names(&self) -> Result<Vec<String>> {
        let first_line_keys = |name: &str, line: Option<&str>| -> Result<Vec<String>> {
            let Some(line) = line else { return Ok(Vec::new()) };
            let v: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(line).map_err(|e| DataError::Row {
                    path: name.into(),
                    line: 1,
                    message: format!("expected a JSON object: {e}"),
                })?;
            Ok(v.keys().cloned().collect())
        };
        let mut names = match self {
            Source::File {
                path,
                format,
                columns,
                ..
            } => {
                check_file(path)?;
                match format {
                    Format::Csv | Format::Tsv => csv::header_of(path, *format, columns.as_deref())?
                        .iter()
                        .map(str::to_string)
                        .collect(),
                    Format::Parquet => parquet::schema_of(path)?
                        .fields()
                        .iter()
                        .map(|f| f.name().clone())
                        .collect(),
                    Format::Jsonl => {
                        let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
                        let line = std::io::BufRead::lines(std::io::BufReader::new(file))
                            .map(|l| l.map_err(|e| DataError::io(path, e)))
                            .find(|l| l.as_ref().map_or(true, |l| !l.trim().is_empty()))
                            .transpose()?;
                        first_line_keys(&self.name(), line.as_deref())?
                    }
                }
            }
            Source::Memory { name, lines } => first_line_keys(
                name,
                lines.iter().find(|l| !l.trim().is_empty()).map(String::as_str),
            )?,
        };
        names.sort();
        Ok(names)
    }

    /// Total progress units (bytes, or rows for Parquet), when known.
    pub fn progress_total(&self) -> Option<u64> {
        match self {
            Source::File { path, format, .. } => match format {
                Format::Parquet => parquet::row_count(path).ok(),
                _ => std::fs::metadata(path).ok().map(|m| m.len()),
            },
            Source::Memory { lines, .. } => Some(lines.iter().map(|l| l.len() as u64 + 1).sum()),
        }
    }

    /// Opens a stream of records; row-level problems arrive as `Err` items, fatal ones end it.
    pub fn records(&self, fields: &FieldSpec) -> Result<Records> {
        match self {
            Source::File {
                path,
                format,
                columns,
                quoted,
            } => {
                check_file(path)?;
                match format {
                    Format::Jsonl => jsonl::open(path, fields),
                    Format::Csv | Format::Tsv => {
                        csv::open(path, *format, columns.as_deref(), fields, *quoted)
                    }
                    Format::Parquet => parquet::open(path, fields),
                }
            }
            Source::Memory { name, lines } => Ok(jsonl::from_lines(name, lines.clone(), fields)),
        }
    }
}

/// Rejects directories, missing and zero-byte files with their own messages.
fn check_file(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| DataError::io(path, e))?;
    if meta.is_dir() {
        return Err(DataError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    if meta.len() == 0 {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Builds a row error.
fn row_error(path: &Path, line: u64, message: impl Into<String>) -> DataError {
    DataError::Row {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

pub use self::csv::QuotedField;
pub(crate) use self::csv::{delimiter, header_of};
pub(crate) use self::parquet::schema_of;
