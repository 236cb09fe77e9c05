//! Trackio's local database (`$TRACKIO_DIR/<project>.db`, by default under
//! `~/.cache/huggingface/trackio/`; SQLite): a run per `run_id` (per name in databases older than
//! Trackio 0.24), its `metrics` rows (a JSON object of the values logged at a step) and its
//! `configs` row (the run's arguments: LR, schedule, batch).

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::ReadError;
use super::json_tolerant::{parse_tolerant, value_f64};
use crate::series::RawRun;

/// The first bytes of every SQLite database.
const MAGIC: &[u8] = b"SQLite format 3\0";

/// Whether `head` (a file's first bytes) starts a SQLite database.
pub fn is_sqlite(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

/// Opens a database without writing to it (a job may be writing it: Trackio keeps it in WAL
/// mode, and a reader sees every committed row).
fn open(path: &Path) -> Result<Connection, ReadError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags(path, flags).map_err(|e| sql_err(path, "metrics", e))
}

fn sql_err(path: &Path, table: &str, e: rusqlite::Error) -> ReadError {
    ReadError::Table {
        path: path.to_path_buf(),
        table: table.to_string(),
        reason: format!("SQLite: {e}"),
    }
}

/// The columns of a table (none when there is no such table).
fn columns(db: &Connection, table: &str) -> Vec<String> {
    let Ok(mut q) = db.prepare(&format!("PRAGMA table_info({table})")) else {
        return Vec::new();
    };
    q.query_map([], |r| r.get::<_, String>(1))
        .map(|rows| rows.flatten().collect())
        .unwrap_or_default()
}

/// Whether `path` is a Trackio project's database (a `metrics` table of JSON rows by run name).
pub fn is_db(path: &Path) -> bool {
    let Ok(db) = open(path) else { return false };
    let cols = columns(&db, "metrics");
    ["run_name", "step", "metrics"]
        .iter()
        .all(|c| cols.iter().any(|k| k == c))
}

/// The runs of a Trackio database, in the order they were first logged.
pub fn read(path: &Path) -> Result<Vec<RawRun>, ReadError> {
    let db = open(path)?;
    // A file that is no database (cut short, overwritten) says so in SQLite's words.
    db.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))
        .map_err(|e| sql_err(path, "sqlite_master", e))?;
    if !is_db(path) {
        return Err(ReadError::Table {
            path: path.to_path_buf(),
            table: "metrics".into(),
            reason: "not in this database, or without Trackio's columns (run_name, step, metrics)".into(),
        });
    }
    // Databases written before Trackio 0.24 know a run by its name alone.
    let id = if columns(&db, "metrics").iter().any(|c| c == "run_id") {
        "run_id"
    } else {
        "run_name"
    };
    let mut runs: Vec<(String, RawRun)> = Vec::new();
    let mut q = (db.prepare(&format!(
        "SELECT {id}, run_name, step, metrics FROM metrics ORDER BY id"
    )))
    .map_err(|e| sql_err(path, "metrics", e))?;
    let rows = q
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                text(r, 3)?,
            ))
        })
        .map_err(|e| sql_err(path, "metrics", e))?;
    for (n, row) in rows.enumerate() {
        let (run_id, name, step, values) = row.map_err(|e| sql_err(path, "metrics", e))?;
        let k = match runs.iter().position(|(r, _)| *r == run_id) {
            Some(k) => k,
            None => {
                let source = format!("{}#{run_id}", path.display());
                runs.push((run_id.clone(), RawRun::new(name, source, "trackio")));
                runs.len() - 1
            }
        };
        let run = &mut runs[k].1;
        run.at_line(n + 1);
        let Ok(serde_json::Value::Object(values)) = parse_tolerant(&values) else {
            continue;
        };
        for (key, v) in &values {
            if let Some(v) = value_f64(v) {
                run.push(key, step.max(0) as u64, v);
            }
        }
    }
    let configs = configs(&db, id);
    Ok(runs
        .into_iter()
        .map(|(run_id, mut run)| {
            for (k, v) in configs.get(&run_id).into_iter().flatten() {
                run.hints.setup.absorb(k, v, "Trackio config");
            }
            run
        })
        .collect())
}

/// A text column that Trackio writes as text or as bytes (orjson's).
fn text(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<String> {
    Ok(match r.get_ref(i)? {
        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
            String::from_utf8_lossy(t).into_owned()
        }
        _ => String::new(),
    })
}

/// Each run's configuration (its scalar values as text), by run id.
fn configs(db: &Connection, id: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out = BTreeMap::new();
    let Ok(mut q) = db.prepare(&format!("SELECT {id}, config FROM configs")) else {
        return out;
    };
    let Ok(rows) = q.query_map([], |r| Ok((r.get::<_, String>(0)?, text(r, 1)?))) else {
        return out;
    };
    for (run, config) in rows.flatten() {
        let Ok(serde_json::Value::Object(m)) = parse_tolerant(&config) else {
            continue;
        };
        let items = m
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), super::context::json_scalar(v)?)))
            .collect();
        out.insert(run, items);
    }
    out
}
