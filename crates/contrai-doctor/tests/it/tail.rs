//! A log followed as it grows (`Tail`, `Live`): each format read piece by piece, cut anywhere
//! (mid-line, mid-record), ends with the runs a one-off read gives, reading only the bytes
//! appended; a file rewritten or truncated (a resumed run) is read again, not duplicated; a
//! Trainer's output directory is one run, read from its newest checkpoint.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use contrai_doctor::read::Tail;
use contrai_doctor::{DoctorConfig, Live, Run, Series, read_path};
use contrai_testkit::{tfevents, wandb};

fn append(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new().create(true).append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

fn points(runs: &[Run], s: Series) -> usize {
    runs.iter().map(|r| r.points(s).len()).sum()
}

/// Writes `log` to `path` in pieces of `piece` bytes, polling after each; the tail's runs then
/// equal a one-off read's, and it read each byte about once.
fn follow_in_pieces(dir: &Path, path: &Path, log: &[u8], piece: usize) -> Vec<Run> {
    let mut tail = Tail::new(dir, None);
    assert!(
        tail.poll().is_err() || tail.runs().is_err(),
        "nothing to read yet"
    );
    for chunk in log.chunks(piece) {
        append(path, chunk);
        let _ = tail.poll().unwrap();
    }
    let runs = tail.runs().unwrap();
    let whole = read_path(dir, None).unwrap();
    assert_eq!(runs.len(), whole.len());
    for (a, b) in runs.iter().zip(&whole) {
        assert_eq!(a.name, b.name);
        assert_eq!(a.series, b.series, "{}", a.name);
        assert_eq!(a.hints, b.hints, "{}", a.name);
    }
    // A line or record cut in two is read again once, no more.
    let read = tail.bytes_read();
    assert!(
        read >= log.len() as u64 && read < 2 * log.len() as u64,
        "read {read} of {}",
        log.len()
    );
    assert!(!tail.poll().unwrap(), "nothing changed");
    assert_eq!(tail.bytes_read(), read, "a poll at rest reads nothing");
    runs
}

#[test]
fn tensorboard_events_appended_record_by_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.out.tfevents.1700000000.host.1.0");
    let mut log = tfevents::text(0, "args/text_summary", r#"{"learning_rate": 5e-05}"#);
    for i in 0..300u64 {
        log.extend(tfevents::scalar(
            i,
            "train/loss",
            2.0 / (1.0 + i as f32),
            i % 2 == 0,
        ));
        log.extend(tfevents::scalar(i, "train/learning_rate", 5e-5, false));
        if i % 50 == 49 {
            log.extend(tfevents::scalar(i, "eval/loss", 1.0 + 0.001 * i as f32, false));
        }
    }
    let runs = follow_in_pieces(dir.path(), &path, &log, 777);
    assert_eq!(points(&runs, Series::TrainLoss), 300);
    assert_eq!(points(&runs, Series::ValLoss), 6);
}

#[test]
fn lightning_csv_appended_row_by_row() {
    let dir = tempfile::tempdir().unwrap();
    let version = dir.path().join("version_0");
    fs::create_dir(&version).unwrap();
    let path = version.join("metrics.csv");
    let mut log = String::from("epoch,step,train_loss,val_loss,val_acc\n");
    for step in 0..400u64 {
        log.push_str(&format!(
            "{},{step},{},,\n",
            step / 100,
            1.0 / (1.0 + step as f64)
        ));
        if step % 100 == 99 {
            log.push_str(&format!("{},{step},,{},{}\n", step / 100, 0.5, 0.8));
        }
    }
    let runs = follow_in_pieces(dir.path(), &path, log.as_bytes(), 113);
    assert_eq!(points(&runs, Series::TrainLoss), 400);
    assert_eq!(points(&runs, Series::ValAccuracy), 4);
}

#[test]
fn contrai_metrics_jsonl_appended_line_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.jsonl");
    let mut log = String::new();
    for step in 1..=250u64 {
        log.push_str(&format!(
            "{{\"step\":{step},\"train_loss\":{},\"lr\":0.001,\"grad_norm\":{}}}\n",
            1.0 / step as f64,
            0.5 + 0.001 * step as f64
        ));
    }
    let runs = follow_in_pieces(dir.path(), &path, log.as_bytes(), 61);
    assert_eq!(points(&runs, Series::GradNorm), 250);
    assert_eq!(runs[0].name, dir.path().file_name().unwrap().to_string_lossy());
}

fn hf_state(entries: u64) -> String {
    let rows: Vec<String> = (1..=entries)
        .map(|i| {
            format!(
                "{{\"step\": {}, \"loss\": {}, \"learning_rate\": 5e-05}}",
                10 * i,
                2.0 / i as f64
            )
        })
        .collect();
    format!("{{\"max_steps\": 1000, \"log_history\": [{}]}}", rows.join(", "))
}

#[test]
fn trainer_state_rewritten_is_read_again_not_appended() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("checkpoint-50");
    fs::create_dir(&ckpt).unwrap();
    fs::write(ckpt.join("trainer_state.json"), hf_state(5)).unwrap();
    let mut tail = Tail::new(dir.path(), None);
    assert!(tail.poll().unwrap());
    assert_eq!(points(&tail.runs().unwrap(), Series::TrainLoss), 5);
    // The Trainer writes the whole state again at its next save, in place.
    fs::write(ckpt.join("trainer_state.json"), hf_state(9)).unwrap();
    assert!(tail.poll().unwrap());
    assert_eq!(points(&tail.runs().unwrap(), Series::TrainLoss), 9);
    assert!(!tail.poll().unwrap());
}

#[test]
fn a_log_truncated_or_replaced_is_read_again_from_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.jsonl");
    let line = |step: u64, loss: f64| format!("{{\"step\":{step},\"loss\":{loss}}}\n");
    let first: String = (1..=40).map(|s| line(s, 1.0)).collect();
    fs::write(&path, &first).unwrap();
    let mut tail = Tail::new(&path, None);
    tail.poll().unwrap();
    assert_eq!(points(&tail.runs().unwrap(), Series::TrainLoss), 40);
    // A resumed run starts the log again: shorter than what was read.
    let again: String = (1..=10).map(|s| line(s, 0.5)).collect();
    fs::write(&path, &again).unwrap();
    assert!(tail.poll().unwrap());
    let runs = tail.runs().unwrap();
    assert_eq!(points(&runs, Series::TrainLoss), 10);
    assert!(runs[0].points(Series::TrainLoss).iter().all(|p| p.value == 0.5));
    // Replaced by another file of the same length or longer (written beside it, renamed over).
    let other: String = (1..=60).map(|s| line(s, 0.25)).collect();
    fs::write(dir.path().join("new"), &other).unwrap();
    fs::rename(dir.path().join("new"), &path).unwrap();
    assert!(tail.poll().unwrap());
    let runs = tail.runs().unwrap();
    assert_eq!(points(&runs, Series::TrainLoss), 60);
    assert!(runs[0].points(Series::TrainLoss).iter().all(|p| p.value == 0.25));
}

#[test]
fn a_path_that_does_not_exist_yet_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("lightning_logs");
    let mut tail = Tail::new(&run, None);
    let err = tail.poll().unwrap_err().to_string();
    assert!(
        err.contains("lightning_logs") && err.contains("no such file"),
        "{err}"
    );
    fs::create_dir_all(run.join("version_0")).unwrap();
    tail.poll().unwrap();
    let err = tail.runs().unwrap_err().to_string();
    assert!(err.contains("no training metrics"), "{err}");
    fs::write(
        run.join("version_0/metrics.csv"),
        "step,train_loss\n1,0.9\n2,0.8\n",
    )
    .unwrap();
    assert!(tail.poll().unwrap());
    assert_eq!(points(&tail.runs().unwrap(), Series::TrainLoss), 2);
}

#[test]
fn a_resumed_job_writing_a_new_event_file_is_a_new_segment() {
    let dir = tempfile::tempdir().unwrap();
    let first: Vec<u8> = (0..50u64)
        .flat_map(|i| tfevents::scalar(i, "train/loss", 1.0 / (1.0 + i as f32), false))
        .collect();
    fs::write(dir.path().join("events.out.tfevents.1.host.1.0"), &first).unwrap();
    let mut tail = Tail::new(dir.path(), None);
    tail.poll().unwrap();
    let second: Vec<u8> = (40..80u64)
        .flat_map(|i| tfevents::scalar(i, "train/loss", 1.0 / (1.0 + i as f32), false))
        .collect();
    fs::write(dir.path().join("events.out.tfevents.2.host.1.0"), &second).unwrap();
    assert!(tail.poll().unwrap());
    let runs = tail.runs().unwrap();
    let whole = read_path(dir.path(), None).unwrap();
    assert_eq!(runs[0].series, whole[0].series);
    let log = runs[0].series[&Series::TrainLoss]
        .log
        .as_ref()
        .expect("a segment");
    assert_eq!(log.cuts.len(), 1);
    assert_eq!(log.cuts[0].index, 50);
}

#[test]
fn an_output_dir_is_one_run_read_from_its_newest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let save = |step: u64| {
        let ckpt = out.join(format!("checkpoint-{step}"));
        fs::create_dir_all(&ckpt).unwrap();
        fs::write(ckpt.join("trainer_state.json"), hf_state(step / 10)).unwrap();
    };
    save(50);
    save(100);
    let runs = read_path(&out, None).unwrap();
    assert_eq!(runs.len(), 1, "one run, not one a checkpoint");
    assert_eq!(runs[0].name, "out");
    assert_eq!(points(&runs, Series::TrainLoss), 10);
    // Followed live: a new checkpoint, the oldest deleted (save_total_limit); one run, one doctor.
    let mut live = Live::new(std::slice::from_ref(&out), None, DoctorConfig::default());
    live.poll();
    assert_eq!(live.runs().len(), 1);
    save(150);
    fs::remove_dir_all(out.join("checkpoint-50")).unwrap();
    let (changed, _) = live.poll();
    assert!(changed);
    assert_eq!(live.runs().len(), 1);
    assert_eq!(live.runs()[0].run.name, "out");
    assert_eq!(live.runs()[0].run.points(Series::TrainLoss).len(), 15);
    assert!(
        live.runs()[0]
            .run
            .source
            .ends_with("checkpoint-150/trainer_state.json")
    );
}

#[test]
fn a_wandb_run_file_appended_record_by_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run-x1.wandb");
    let mut file = wandb::RunFile::new();
    file.run("x1", "bert-sst2");
    file.config(&[("learning_rate", "5e-05"), ("max_steps", "1200")]);
    // A Trainer's rows: W&B's step counts the rows, the Trainer's own step is logged beside.
    for s in 1..=1200u64 {
        let loss = format!("{}", 2.0 / (1.0 + s as f64 / 50.0));
        let gs = s.to_string();
        file.history(
            s,
            &[
                ("train/loss", &loss),
                ("train/learning_rate", "5e-05"),
                ("train/global_step", &gs),
            ],
        );
    }
    let runs = follow_in_pieces(dir.path(), &path, file.bytes(), 3001);
    assert_eq!(points(&runs, Series::TrainLoss), 1200);
    assert_eq!(runs[0].name, "bert-sst2");
}
