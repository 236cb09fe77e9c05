//! Folders as users have them: a file that is no log beside the logs is passed over and said,
//! an empty log beside a good one too, a folder given with a format is searched for it, and a
//! folder reached by several links (a loop) is read once.

use std::path::Path;

use contrai_doctor::{Format, Live, ReadError, read_path, read_path_noting};

fn trainer_state(dir: &Path) {
    let logs: Vec<String> = (1..=40)
        .map(|s| {
            format!(
                r#"{{"step":{},"loss":{},"learning_rate":1e-4}}"#,
                10 * s,
                2.0 / s as f64
            )
        })
        .collect();
    std::fs::write(
        dir.join("trainer_state.json"),
        format!(
            r#"{{"global_step":400,"max_steps":400,"log_history":[{}]}}"#,
            logs.join(",")
        ),
    )
    .unwrap();
}

fn metrics_csv(path: &Path) {
    let rows: Vec<String> = (0..30)
        .map(|s| format!("{s},{}", 1.0 / (1.0 + s as f64)))
        .collect();
    std::fs::write(path, format!("step,train_loss\n{}\n", rows.join("\n"))).unwrap();
}

#[test]
fn a_file_that_is_no_log_beside_a_trainer_state_is_passed_over_and_said() {
    let dir = tempfile::tempdir().unwrap();
    trainer_state(dir.path());
    std::fs::write(dir.path().join("classes.csv"), "cat\ndog\n").unwrap();
    let (runs, skipped) = read_path_noting(dir.path(), None).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].path.ends_with("classes.csv"), "{skipped:?}");
    assert!(skipped[0].reason.contains("unrecognised"), "{skipped:?}");
    // Followed live, the folder has its run at once (it waited forever before).
    let mut live = Live::new(&[dir.path().to_path_buf()], None, Default::default());
    live.poll();
    live.finish();
    assert_eq!(live.runs().len(), 1);
}

#[test]
fn an_empty_log_beside_a_good_one_is_passed_over_and_said() {
    let dir = tempfile::tempdir().unwrap();
    for v in ["version_0", "version_1"] {
        std::fs::create_dir_all(dir.path().join(v)).unwrap();
    }
    std::fs::write(dir.path().join("version_0/metrics.csv"), "").unwrap();
    metrics_csv(&dir.path().join("version_1/metrics.csv"));
    let (runs, skipped) = read_path_noting(dir.path(), None).unwrap();
    assert_eq!(runs.len(), 1);
    assert!(
        runs[0].source.ends_with("version_1/metrics.csv"),
        "{}",
        runs[0].source
    );
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].path.ends_with("version_0/metrics.csv"), "{skipped:?}");
    // The empty log alone is still an error that names it.
    let err = read_path(&dir.path().join("version_0"), None).unwrap_err();
    assert!(err.to_string().contains("version_0"), "{err}");
}

#[test]
fn a_folder_given_with_a_format_is_searched_for_logs_of_that_format() {
    let dir = tempfile::tempdir().unwrap();
    metrics_csv(&dir.path().join("metrics.csv"));
    trainer_state(dir.path());
    let runs = read_path(dir.path(), Some(Format::Csv)).unwrap();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].source.ends_with("metrics.csv"));
    let runs = read_path(dir.path(), Some(Format::HfTrainerState)).unwrap();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].source.ends_with("trainer_state.json"));
    let err = read_path(dir.path(), Some(Format::Jsonl)).unwrap_err();
    assert!(matches!(err, ReadError::NoLogOfFormat { .. }), "{err}");
    assert!(err.to_string().contains("no jsonl log"), "{err}");
}

#[test]
fn a_folder_reached_by_a_link_loop_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    metrics_csv(&dir.path().join("log.csv"));
    std::os::unix::fs::symlink(dir.path(), dir.path().join("loop")).unwrap();
    std::os::unix::fs::symlink(dir.path(), dir.path().join("again")).unwrap();
    let runs = read_path(dir.path(), None).unwrap();
    assert_eq!(
        runs.len(),
        1,
        "{:?}",
        runs.iter().map(|r| &r.source).collect::<Vec<_>>()
    );
}

#[test]
fn a_log_passed_over_while_empty_is_read_once_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    metrics_csv(&dir.path().join("a.csv"));
    std::fs::write(dir.path().join("b.csv"), "").unwrap();
    let mut live = Live::new(&[dir.path().to_path_buf()], None, Default::default());
    live.poll();
    live.finish();
    assert_eq!(live.runs().len(), 1);
    metrics_csv(&dir.path().join("b.csv"));
    live.poll();
    live.finish();
    assert_eq!(
        live.runs().len(),
        2,
        "the folder's listing did not change, b.csv did"
    );
}
