//! The SQLite databases runs live in. Trackio's local database: a run per run id (per name in databases older than Trackio 0.24),
//! its JSON rows at their steps (NaN as Trackio writes it), its config as the run's setup; rows a
//! job commits while the database is followed (WAL mode, as Trackio keeps it) read as they land;
//! any other SQLite database said to be unknown. MLflow's database store (`mlflow.db`, MLflow 3's
//! default): its active runs, NaN as MLflow keeps it, its parameters as the setup. The tables are
//! Trackio 0.43's and MLflow 3.17's; databases written by `trackio` and by `mlflow server`
//! themselves are read in the Python package's tests (`test_tracking_servers.py`).

use std::path::Path;

use contrai_doctor::{Format, ReadError, Series, Tail, read_path};
use rusqlite::Connection;

/// An empty project database with Trackio 0.43's tables, in WAL mode.
fn project(path: &Path, with_run_id: bool) -> Connection {
    let db = Connection::open(path).unwrap();
    db.pragma_update(None, "journal_mode", "WAL").unwrap();
    let id = if with_run_id { "run_id TEXT NOT NULL," } else { "" };
    db.execute_batch(&format!(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, {id} timestamp TEXT NOT NULL,
             run_name TEXT NOT NULL, step INTEGER NOT NULL, metrics TEXT NOT NULL, log_id TEXT, space_id TEXT);
         CREATE TABLE configs (id INTEGER PRIMARY KEY AUTOINCREMENT, {id} run_name TEXT NOT NULL,
             config TEXT NOT NULL, created_at TEXT NOT NULL);"
    ))
    .unwrap();
    db
}

/// One `trackio.log` row; orjson's bytes, as Trackio writes them.
fn log(db: &Connection, run: (&str, &str), step: i64, metrics: &str) {
    db.execute(
        "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) VALUES (?1, '2026-12-06T10:00:00', ?2, ?3, ?4)",
        rusqlite::params![run.0, run.1, step, metrics.as_bytes()],
    )
    .unwrap();
}

/// A Trainer run as `report_to="trackio"` logs it: train loss and LR every 10 steps, eval every 100.
fn trainer_rows(db: &Connection, run: (&str, &str), from: i64, to: i64) {
    for s in (from..=to).step_by(10) {
        let loss = 0.8 * (-(s as f64) / 300.0).exp() + 0.05;
        log(
            db,
            run,
            s,
            &format!(r#"{{"train/loss": {loss}, "train/learning_rate": 5e-05, "train/global_step": {s}}}"#),
        );
        if s % 100 == 0 {
            log(
                db,
                run,
                s,
                &format!(r#"{{"eval/loss": {}, "eval/accuracy": 0.9}}"#, loss + 0.03),
            );
        }
    }
}

#[test]
fn a_project_reads_as_its_runs_with_their_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sst2.db");
    let db = project(&path, true);
    let config = r#"{"learning_rate": 5e-05, "lr_scheduler_type": "linear", "per_device_train_batch_size": 32, "_Username": "u"}"#;
    db.execute(
        "INSERT INTO configs (run_id, run_name, config, created_at) VALUES ('a1', 'bert-lr5e-5', ?1, 'now')",
        [config],
    )
    .unwrap();
    trainer_rows(&db, ("a1", "bert-lr5e-5"), 10, 500);
    trainer_rows(&db, ("b2", "bert-lr1e-4"), 10, 300);
    log(&db, ("b2", "bert-lr1e-4"), 310, r#"{"train/loss": "NaN"}"#);
    drop(db);
    let runs = read_path(&path, None).unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["bert-lr5e-5", "bert-lr1e-4"]);
    let (a, b) = (&runs[0], &runs[1]);
    assert_eq!(a.format, "trackio");
    assert_eq!(a.points(Series::TrainLoss).len(), 50);
    assert_eq!(
        a.points(Series::ValLoss)
            .iter()
            .map(|p| p.step)
            .collect::<Vec<_>>(),
        [100, 200, 300, 400, 500]
    );
    assert_eq!(
        (a.hints.setup.peak_lr, a.hints.setup.batch_size),
        (Some(5e-5), Some(32))
    );
    assert!(a.hints.setup.settings.iter().all(|s| s.file == "Trackio config"));
    assert!(b.points(Series::TrainLoss).last().unwrap().value.is_nan());
    assert_eq!(
        b.hints.setup.peak_lr, None,
        "the config of another run is not this one's"
    );
    // A folder of projects (Trackio's own) reads each database in it.
    assert_eq!(read_path(dir.path(), None).unwrap().len(), 2);
}

#[test]
fn rows_committed_while_followed_are_read_as_they_land() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.db");
    // The job's connection stays open, its rows in the write-ahead log (no checkpoint).
    let db = project(&path, true);
    db.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    trainer_rows(&db, ("r", "run"), 10, 200);
    let mut tail = Tail::new(&path, None);
    assert!(tail.poll().unwrap());
    assert_eq!(tail.runs().unwrap()[0].points(Series::TrainLoss).len(), 20);
    let db_len = std::fs::metadata(&path).unwrap().len();
    trainer_rows(&db, ("r", "run"), 210, 400);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        db_len,
        "the rows are in the -wal file only"
    );
    assert!(tail.poll().unwrap());
    let run = &tail.runs().unwrap()[0];
    assert_eq!(run.points(Series::TrainLoss).len(), 40);
    assert_eq!(run.points(Series::ValLoss).last().unwrap().step, 400);
    assert!(!tail.poll().unwrap());
}

#[test]
fn a_database_older_than_run_ids_reads_by_run_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let db = project(&path, false);
    for s in 0..30 {
        db.execute(
            "INSERT INTO metrics (timestamp, run_name, step, metrics) VALUES ('t', 'old-run', ?1, ?2)",
            rusqlite::params![s, format!(r#"{{"loss": {}}}"#, 1.0 / (s + 1) as f64)],
        )
        .unwrap();
    }
    drop(db);
    let runs = read_path(&path, None).unwrap();
    assert_eq!((runs.len(), runs[0].name.as_str()), (1, "old-run"));
    assert_eq!(runs[0].points(Series::TrainLoss).len(), 30);
}

#[test]
fn another_databases_file_is_said_to_be_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("app.db");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE users (id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'a');")
        .unwrap();
    assert!(matches!(
        read_path(&other, None),
        Err(ReadError::UnknownFormat { .. })
    ));
    // Cut short after its header: an error naming the file, never a panic.
    let cut = dir.path().join("cut.db");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend([0xAB; 300]);
    std::fs::write(&cut, bytes).unwrap();
    let err = read_path(&cut, Some(Format::Trackio)).unwrap_err();
    assert!(err.to_string().contains("cut.db"), "{err}");
}

/// An MLflow database with MLflow 3.17's tables (the columns read) and two runs, one deleted.
fn mlflow_db(path: &Path) {
    let db = Connection::open(path).unwrap();
    db.execute_batch(
        "CREATE TABLE runs (run_uuid VARCHAR(32) PRIMARY KEY, name VARCHAR(250), status VARCHAR(9),
             start_time BIGINT, lifecycle_stage VARCHAR(20), experiment_id INTEGER);
         CREATE TABLE metrics (key VARCHAR(250), value FLOAT, timestamp BIGINT, run_uuid VARCHAR(32),
             step BIGINT, is_nan BOOLEAN);
         CREATE TABLE params (key VARCHAR(250), value VARCHAR(8000), run_uuid VARCHAR(32));
         CREATE TABLE tags (key VARCHAR(250), value VARCHAR(8000), run_uuid VARCHAR(32));
         INSERT INTO runs VALUES ('aa', 'bert-sst2', 'FINISHED', 2, 'active', 1),
                                 ('bb', 'scratch', 'FINISHED', 1, 'deleted', 1);
         INSERT INTO params VALUES ('learning_rate', '3e-05', 'aa'), ('lr_scheduler_type', 'linear', 'aa'),
                                   ('per_device_train_batch_size', '16', 'aa'), ('learning_rate', '1', 'bb');
         INSERT INTO tags VALUES ('mlflow.runName', 'bert-sst2', 'aa');",
    )
    .unwrap();
    for s in (0..=400).step_by(10) {
        let loss = 0.7 * (-(s as f64) / 200.0).exp() + 0.05;
        let add = |key: &str, value: f64, nan: bool| {
            db.execute(
                "INSERT INTO metrics VALUES (?1, ?2, ?3, 'aa', ?4, ?5)",
                rusqlite::params![key, value, 1_700_000_000_000i64 + s, s, nan],
            )
            .unwrap();
        };
        add("train_loss", loss, false);
        if s % 100 == 0 {
            add("eval_loss", loss + 0.05, false);
        }
        if s == 400 {
            add("grad_norm", 0.0, true);
        }
    }
}

#[test]
fn an_mlflow_database_reads_as_its_active_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mlflow.db");
    mlflow_db(&path);
    let runs = read_path(&path, None).unwrap();
    assert_eq!(runs.len(), 1, "the deleted run is not read");
    let run = &runs[0];
    assert_eq!(
        (run.name.as_str(), run.format.as_str()),
        ("bert-sst2", "mlflow_db")
    );
    assert_eq!(run.source, format!("{}#aa", path.display()));
    assert_eq!(run.points(Series::TrainLoss).len(), 41);
    assert_eq!(
        run.points(Series::ValLoss)
            .iter()
            .map(|p| p.step)
            .collect::<Vec<_>>(),
        [0, 100, 200, 300, 400]
    );
    assert!(
        run.points(Series::GradNorm)[0].value.is_nan(),
        "is_nan: NaN, whatever `value` holds"
    );
    let setup = &run.hints.setup;
    assert_eq!((setup.peak_lr, setup.batch_size), (Some(3e-5), Some(16)));
    assert!(setup.settings.iter().all(|s| s.file == "MLflow params"));
    // Found in its folder; `--format mlflow_db` names it.
    assert_eq!(
        read_path(dir.path(), Some(Format::MlflowDb)).unwrap()[0].name,
        "bert-sst2"
    );
}
