//! Parquet, read in record batches; text, label and id columns are cast to strings.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, SchemaRef};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::{FieldSpec, Raw, Record, Records};
use crate::error::{DataError, Result};

fn builder(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| DataError::Format {
        path: path.to_path_buf(),
        message: format!("not a readable Parquet file: {e}"),
    })
}

/// The number of rows recorded in the file's footer.
pub(super) fn row_count(path: &Path) -> Result<u64> {
    Ok(builder(path)?.metadata().file_metadata().num_rows().max(0) as u64)
}

/// The Arrow schema of a Parquet file, for writing rows back.
pub(crate) fn schema_of(path: &Path) -> Result<SchemaRef> {
    Ok(builder(path)?.schema().clone())
}

/// Opens a Parquet file as a stream of records.
pub(super) fn open(path: &Path, fields: &FieldSpec) -> Result<Records> {
    let b = builder(path)?;
    let names: Vec<String> = b.schema().fields().iter().map(|f| f.name().clone()).collect();
    let cols = fields.resolve(path, &names)?.positions(&names);
    let reader = b.with_batch_size(4096).build().map_err(|e| DataError::Format {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(Box::new(Rows {
        path: path.to_path_buf(),
        reader,
        cols,
        current: None,
        row: 0,
        line: 0,
        done: false,
    }))
}

/// A batch with its text, label and id columns as strings.
struct Batch {
    batch: Arc<RecordBatch>,
    strings: [Option<StringArray>; 3],
}

/// Iterates over the rows of all batches.
struct Rows {
    path: PathBuf,
    reader: ParquetRecordBatchReader,
    cols: [Option<usize>; 3],
    current: Option<Batch>,
    row: usize,
    line: u64,
    done: bool,
}

impl Rows {
    /// Loads the next batch; `None` at the end.
    fn next_batch(&mut self) -> Option<Result<()>> {
        let batch = match self.reader.next()? {
            Ok(b) => b,
            Err(e) => {
                return Some(Err(DataError::Format {
                    path: self.path.clone(),
                    message: format!("after row {}: {e}", self.line),
                }));
            }
        };
        let cast = |i: Option<usize>| -> Result<Option<StringArray>> {
            let Some(i) = i else { return Ok(None) };
            let col: &ArrayRef = batch.column(i);
            let s = arrow_cast::cast(col, &DataType::Utf8).map_err(|e| DataError::Format {
                path: self.path.clone(),
                message: format!(
                    "column `{}` cannot be read as text: {e}",
                    batch.schema().field(i).name()
                ),
            })?;
            Ok(s.as_any().downcast_ref::<StringArray>().cloned())
        };
        let strings = match (|| {
            Ok::<_, DataError>([cast(self.cols[0])?, cast(self.cols[1])?, cast(self.cols[2])?])
        })() {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        self.current = Some(Batch {
            batch: Arc::new(batch),
            strings,
        });
        self.row = 0;
        Some(Ok(()))
    }
}

impl Iterator for Rows {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        while self
            .current
            .as_ref()
            .is_none_or(|c| self.row >= c.batch.num_rows())
        {
            match self.next_batch() {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => {
                    self.done = true;
                    return (self.line == 0).then(|| {
                        Err(DataError::Empty {
                            path: self.path.clone(),
                        })
                    });
                }
            }
        }
        let cur = self.current.as_ref()?;
        let row = self.row;
        self.row += 1;
        self.line += 1;
        let get = |k: usize| {
            cur.strings[k]
                .as_ref()
                .filter(|a| !a.is_null(row))
                .map(|a| a.value(row).to_string())
        };
        Some(Ok(Record {
            line: self.line,
            id: get(2).unwrap_or_else(|| self.line.to_string()),
            text: get(0),
            label: get(1),
            raw: Raw::Batch {
                batch: cur.batch.clone(),
                row,
            },
            progress: 1,
        }))
    }
}
