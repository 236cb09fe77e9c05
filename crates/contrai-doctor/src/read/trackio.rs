//! Trackio's local database (`$TRACKIO_DIR/<project>.db`, by default under
//! `~/.cache/huggingface/trackio/`; SQLite): a run per `run_id` (per name in databases older than
//! Trackio 0.24), its `metrics` rows (a JSON object of the values logged at a step) and its
//! `configs` row (the run's arguments: LR, schedule, batch).

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::Connection;

use super::ReadError;
use super::json_tolerant::{parse_tolerant, value_f64};
use super::sqlite::{self, has_table, text};
use crate::series::RawRun;

/// Trackio's table of logged rows, with the columns read.
const METRICS: [(&str, &[&str]); 1] = [("metrics", &["run_name", "step", "metrics"])];

/// Whether `path` is a Trackio project's database (a `metrics` table of JSON rows by run name).
pub fn is_db(path: &Path) -> bool {
    sqlite::open_shaped(path, &METRICS, "Trackio").is_ok()
}

/// The runs of a Trackio database, in the order they were first logged.
pub fn read(path: &Path) -> Result<Vec<RawRun>, ReadError> {
    let db = sqlite::open_shaped(path, &METRICS, "Trackio")?;
    // Databases written before Trackio 0.24 know a run by its name alone.
    let id = if has_table(&db, "metrics", &["run_id"]) {
        "run_id"
    } else {
        "run_name"
    };
    let mut runs: Vec<(String, RawRun)> = Vec::new();
    // Each run's place in `runs`, by id (a project holds many runs and many rows).
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut q = (db.prepare(&format!(
        "SELECT {id}, run_name, step, metrics FROM metrics ORDER BY id"
    )))
    .map_err(|e| sqlite::error(path, "metrics", e))?;
    let rows = q
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                text(r, 3)?,
            ))
        })
        .map_err(|e| sqlite::error(path, "metrics", e))?;
    for (n, row) in rows.enumerate() {
        let (run_id, name, step, values) = row.map_err(|e| sqlite::error(path, "metrics", e))?;
        let k = *index.entry(run_id.clone()).or_insert_with(|| {
            let source = format!("{}#{run_id}", path.display());
            runs.push((run_id, RawRun::new(name, source, "trackio")));
            runs.len() - 1
        });
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
