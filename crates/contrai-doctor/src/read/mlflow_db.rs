//! MLflow's database store (`mlflow.db`, SQLite: MLflow 3's default where no tracking URI is
//! set, and what `mlflow server --backend-store-uri sqlite:///...` keeps): each active run, read
//! into the same [`Stored`] form as the file store's and a server's.

use std::path::Path;

use rusqlite::Connection;

use super::ReadError;
use super::mlflow::{Row, Stored};
use super::sqlite;
use crate::series::RawRun;

/// The tables read, with the columns read from each.
const TABLES: [(&str, &[&str]); 4] = [
    ("runs", &["run_uuid", "name", "lifecycle_stage", "start_time"]),
    (
        "metrics",
        &["key", "value", "timestamp", "run_uuid", "step", "is_nan"],
    ),
    ("params", &["key", "value", "run_uuid"]),
    ("tags", &["key", "value", "run_uuid"]),
];

/// Whether `path` is an MLflow database store.
pub fn is_db(path: &Path) -> bool {
    sqlite::open_shaped(path, &TABLES, "MLflow").is_ok()
}

/// The active runs of an MLflow database, oldest first.
pub fn read(path: &Path) -> Result<Vec<RawRun>, ReadError> {
    let db = sqlite::open_shaped(path, &TABLES, "MLflow")?;
    let err = |e| sqlite::error(path, "runs", e);
    let mut q = (db
        .prepare("SELECT run_uuid, name FROM runs WHERE lifecycle_stage = 'active' ORDER BY start_time"))
    .map_err(err)?;
    let runs: Vec<(String, Option<String>)> = (q.query_map([], |r| Ok((r.get(0)?, r.get(1)?))))
        .map_err(err)?
        .collect::<Result<_, _>>()
        .map_err(err)?;
    runs.into_iter()
        .map(|(id, name)| {
            let stored = Stored {
                source: format!("{}#{id}", path.display()),
                params: pairs(&db, path, "params", &id)?,
                tags: pairs(&db, path, "tags", &id)?,
                metrics: histories(&db, path, &id)?,
                id,
                name,
            };
            Ok(stored.into_raw("mlflow_db"))
        })
        .collect()
}

/// A run's `key value` rows of `table` (params or tags), sorted by key.
fn pairs(db: &Connection, path: &Path, table: &str, run: &str) -> Result<Vec<(String, String)>, ReadError> {
    let err = |e| sqlite::error(path, table, e);
    let mut q = (db.prepare(&format!(
        "SELECT key, value FROM {table} WHERE run_uuid = ?1 ORDER BY key"
    )))
    .map_err(err)?;
    let rows = q
        .query_map([run], |r| {
            Ok((r.get(0)?, r.get::<_, Option<String>>(1)?.unwrap_or_default()))
        })
        .map_err(err)?;
    rows.collect::<Result<_, _>>().map_err(err)
}

/// A run's metric histories, each in the order it was logged (MLflow keeps NaN as 0 with
/// `is_nan` set).
fn histories(
    db: &Connection,
    path: &Path,
    run: &str,
) -> Result<std::collections::BTreeMap<String, Vec<Row>>, ReadError> {
    let err = |e| sqlite::error(path, "metrics", e);
    let mut q = (db.prepare(
        "SELECT key, value, timestamp, step, is_nan FROM metrics WHERE run_uuid = ?1 ORDER BY rowid",
    ))
    .map_err(err)?;
    let mut out = std::collections::BTreeMap::<String, Vec<Row>>::new();
    let rows = q
        .query_map([run], |r| {
            let (value, nan) = (r.get::<_, f64>(1)?, r.get::<_, bool>(4)?);
            let row = Row {
                line: 0,
                timestamp: r.get::<_, i64>(2)?.max(0) as u64,
                step: r.get::<_, i64>(3)?.max(0) as u64,
                value: if nan { f64::NAN } else { value },
            };
            Ok((r.get::<_, String>(0)?, row))
        })
        .map_err(err)?;
    for row in rows {
        let (key, mut row) = row.map_err(err)?;
        let history = out.entry(key).or_default();
        row.line = history.len() + 1;
        history.push(row);
    }
    Ok(out)
}
