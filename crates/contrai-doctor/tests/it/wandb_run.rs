//! W&B run files (`wandb/run-*/run-<id>.wandb`): the history at the framework's own steps, the
//! config as the run's arguments, the run's name; records that cross blocks joined; a record cut
//! short said, a bad checksum named with its offset; a `wandb/` folder read run by run, once.
//! (A real offline run, written by `wandb` itself from a Trainer job, is read in the Python
//! package's tests: `test_trackers.py`.)

use std::fs;
use std::path::Path;

use contrai_doctor::{ReadError, Run, Series, read_path, read_path_noting};
use contrai_testkit::wandb::RunFile;

/// A Hugging Face Trainer's run as its `WandbCallback` logs it: a row of train loss and LR every
/// 10 steps, an eval row every 100, each with `train/global_step` (W&B's own step counts rows).
fn trainer_run(steps: u64) -> RunFile {
    let mut file = RunFile::new();
    file.run("q1w2e3", "bert-sst2");
    file.config(&[
        ("learning_rate", "5e-05"),
        ("per_device_train_batch_size", "16"),
        ("lr_scheduler_type", "\"linear\""),
        ("max_steps", &steps.to_string()),
        ("_wandb", "{}"),
    ]);
    let mut row = 0;
    for s in (10..=steps).step_by(10) {
        row += 1;
        let (loss, lr, gs) = (
            0.7 * (-(s as f64) / 400.0).exp() + 0.05,
            5e-5 * (1.0 - s as f64 / steps as f64),
            s.to_string(),
        );
        file.history(
            row,
            &[
                ("train/loss", &loss.to_string()),
                ("train/learning_rate", &lr.to_string()),
                ("train/global_step", &gs),
                ("_runtime", "1.5"),
            ],
        );
        if s % 100 == 0 {
            row += 1;
            file.history(
                row,
                &[
                    ("eval/loss", &(loss + 0.02).to_string()),
                    ("eval/accuracy", "0.9"),
                    ("train/global_step", &gs),
                ],
            );
        }
    }
    file
}

fn write(dir: &Path, rel: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, bytes).unwrap();
    path
}

fn steps(run: &Run, s: Series) -> Vec<u64> {
    run.points(s).iter().map(|p| p.step).collect()
}

#[test]
fn the_history_is_read_at_the_trainers_steps_with_the_config_and_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "run-q1w2e3.wandb", trainer_run(600).bytes());
    let runs = read_path(&path, None).unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!((run.name.as_str(), run.format.as_str()), ("bert-sst2", "wandb"));
    assert_eq!(
        steps(run, Series::TrainLoss),
        (10..=600).step_by(10).collect::<Vec<_>>()
    );
    assert_eq!(
        steps(run, Series::ValLoss),
        vec![100, 200, 300, 400, 500, 600],
        "the Trainer's steps, not W&B's rows"
    );
    assert_eq!(run.points(Series::ValAccuracy).len(), 6);
    assert!((run.points(Series::TrainLoss)[0].value - (0.7 * (-0.025f64).exp() + 0.05)).abs() < 1e-12);
    let setup = &run.hints.setup;
    assert_eq!((setup.peak_lr, setup.batch_size), (Some(5e-5), Some(16)));
    assert_eq!(run.hints.total_steps, Some(600));
    let read: Vec<Series> = run.series.keys().copied().collect();
    assert_eq!(
        read,
        [
            Series::TrainLoss,
            Series::ValLoss,
            Series::ValAccuracy,
            Series::Lr
        ]
    );
}

#[test]
fn records_that_cross_block_ends_are_joined() {
    // 3,000 rows: about 300 KB, so rows cross nine block ends; one row of 70 KB spans three blocks.
    let mut file = trainer_run(30_000);
    let long_key = "k".repeat(70_000);
    file.history(
        99_999,
        &[
            (long_key.as_str(), "1.0"),
            ("train/global_step", "30001"),
            ("train/loss", "0.01"),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "run-q1w2e3.wandb", file.bytes());
    assert!(file.bytes().len() > 9 * 32 * 1024);
    let run = &read_path(&path, None).unwrap()[0];
    assert_eq!(run.points(Series::TrainLoss).len(), 3001);
    assert_eq!(run.points(Series::TrainLoss).last().unwrap().step, 30_001);
    assert!(run.hints.partial.is_empty());
}

#[test]
fn a_record_cut_short_is_said_and_a_bad_checksum_is_named_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let whole = trainer_run(600);
    let bytes = whole.bytes();
    // Cut inside the last record: everything before it is read, the cut said.
    let cut = write(dir.path(), "cut/run-a.wandb", &bytes[..bytes.len() - 5]);
    let run = &read_path(&cut, None).unwrap()[0];
    assert_eq!(run.points(Series::TrainLoss).len(), 60);
    assert_eq!(run.points(Series::ValLoss).len(), 5, "the last eval row was cut");
    assert_eq!(run.hints.partial.len(), 1, "{:?}", run.hints.partial);
    assert!(
        run.hints.partial[0]
            .what
            .contains("runs past the end of the file")
    );
    // One byte changed in a record's data: its checksum no longer holds.
    let mut bad = bytes.to_vec();
    let at = bytes.len() / 2;
    bad[at] ^= 0x55;
    let path = write(dir.path(), "bad/run-b.wandb", &bad);
    match read_path(&path, None) {
        Err(ReadError::Corrupt {
            path: p,
            offset,
            reason,
        }) => {
            assert_eq!(p, path);
            assert!(
                offset <= at as u64 && at as u64 - offset < 400,
                "{offset} for a flip at {at}"
            );
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("expected a corrupt record, got {other:?}"),
    }
    // Not a W&B file at all.
    let text = write(dir.path(), "text/run-c.wandb", b"step,loss\n1,2\n");
    assert!(matches!(
        read_path(&text, None),
        Err(ReadError::Corrupt { offset: 0, .. })
    ));
}

#[test]
fn a_wandb_folder_is_read_run_by_run_once_without_its_logs() {
    let dir = tempfile::tempdir().unwrap();
    let wandb = dir.path().join("wandb");
    write(
        &wandb,
        "run-20261206_101010-aaaa/run-aaaa.wandb",
        trainer_run(300).bytes(),
    );
    write(
        &wandb,
        "run-20261206_101010-aaaa/logs/debug.log",
        b"2026-12-06 10:10:10,123 INFO setup,done,1,2\n",
    );
    write(
        &wandb,
        "run-20261206_101010-aaaa/files/config.yaml",
        b"learning_rate:\n  value: 5e-05\n",
    );
    let mut other = RunFile::new();
    other.run("bbbb", "");
    for s in 1..=50u64 {
        other.history(s, &[("loss", &(1.0 / s as f64).to_string())]);
    }
    write(
        &wandb,
        "offline-run-20261206_111111-bbbb/run-bbbb.wandb",
        other.bytes(),
    );
    #[cfg(unix)]
    std::os::unix::fs::symlink(
        wandb.join("offline-run-20261206_111111-bbbb"),
        wandb.join("latest-run"),
    )
    .unwrap();
    let (runs, skipped) = read_path_noting(&wandb, None).unwrap();
    let mut names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["bbbb", "bert-sst2"],
        "each run once (latest-run is a link), named by its record"
    );
    assert!(skipped.is_empty(), "W&B's own logs are not searched: {skipped:?}");
    let plain = runs.iter().find(|r| r.name == "bbbb").unwrap();
    assert_eq!(
        steps(plain, Series::TrainLoss),
        (1..=50).collect::<Vec<_>>(),
        "W&B's step when none is logged"
    );
}
