//! SQLite databases the doctor reads (Trackio's, MLflow's database store): opened read-only, a
//! database that is none said in SQLite's own words.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::ReadError;

/// The first bytes of every SQLite database.
const MAGIC: &[u8] = b"SQLite format 3\0";

/// Whether `head` (a file's first bytes) starts a SQLite database.
pub fn is_sqlite(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

/// Opens a database without writing to it (a job may be writing it; in WAL mode a reader sees
/// every committed row).
pub fn open(path: &Path) -> Result<Connection, ReadError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let db = Connection::open_with_flags(path, flags).map_err(|e| error(path, "sqlite_master", e))?;
    // A file that is no database (cut short, overwritten) says so here.
    db.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))
        .map_err(|e| error(path, "sqlite_master", e))?;
    Ok(db)
}

/// A database that holds each of `tables` with its columns (what the caller reads), opened
/// read-only; else which table is missing or short of a column, `what` naming the database the
/// caller expected (Trackio's, MLflow's).
pub fn open_shaped(path: &Path, tables: &[(&str, &[&str])], what: &str) -> Result<Connection, ReadError> {
    let db = open(path)?;
    match tables.iter().find(|(t, columns)| !has_table(&db, t, columns)) {
        None => Ok(db),
        Some((table, columns)) => Err(ReadError::Table {
            path: path.to_path_buf(),
            table: table.to_string(),
            reason: format!(
                "not in this database, or without {what}'s columns ({})",
                columns.join(", ")
            ),
        }),
    }
}

/// A table that could not be read, in SQLite's words.
pub fn error(path: &Path, table: &str, e: rusqlite::Error) -> ReadError {
    ReadError::Table {
        path: path.to_path_buf(),
        table: table.to_string(),
        reason: format!("SQLite: {e}"),
    }
}

/// Whether `table` is in the database with every one of `columns`.
pub fn has_table(db: &Connection, table: &str, columns: &[&str]) -> bool {
    let Ok(mut q) = db.prepare(&format!("PRAGMA table_info({table})")) else {
        return false;
    };
    let have: Vec<String> = q
        .query_map([], |r| r.get::<_, String>(1))
        .map(|rows| rows.flatten().collect())
        .unwrap_or_default();
    columns.iter().all(|c| have.iter().any(|h| h == c))
}

/// A text column written as text or as bytes (Trackio writes orjson's bytes).
pub fn text(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<String> {
    Ok(match r.get_ref(i)? {
        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
            String::from_utf8_lossy(t).into_owned()
        }
        _ => String::new(),
    })
}
