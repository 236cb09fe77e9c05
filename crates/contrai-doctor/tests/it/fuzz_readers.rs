//! Parsers never panic: per format, random truncation and corruption of a valid log either
//! reads or fails with an error, and a truncated TensorBoard tail reads cleanly. Each reader
//! tries `CONTRAI_FUZZ_CASES` inputs (64 by default, what CI runs; BENCHMARKS.md has a long run).

use std::fs;
use std::path::{Path, PathBuf};

use contrai_doctor::{DoctorConfig, Format, diagnose, read_path};
use proptest::prelude::*;

use contrai_testkit::tfevents::{scalar as tb_record, text as tb_text_record};
use contrai_testkit::wandb::RunFile;

/// A small valid W&B run file: a run, its config, 40 rows.
fn wandb_run_file() -> RunFile {
    let mut file = RunFile::new();
    file.run("abc", "tiny");
    file.config(&[("learning_rate", "0.001"), ("max_steps", "400")]);
    for i in 1..=40u64 {
        let (loss, gs) = ((2.0 / i as f64).to_string(), (i * 10).to_string());
        file.history(i, &[("train/loss", &loss), ("train/global_step", &gs)]);
    }
    file
}

/// A small valid event file.
pub fn tb_file() -> Vec<u8> {
    let args = r#"{"lr_scheduler_type": "linear", "learning_rate": 5e-05, "per_device_train_batch_size": 8}"#;
    let mut out = tb_text_record(0, "args/text_summary", args);
    for i in 0..40u64 {
        out.extend(tb_record(
            i * 10,
            "train/loss",
            2.0 / (1.0 + i as f32),
            i % 2 == 0,
        ));
        if i % 5 == 0 {
            out.extend(tb_record(i * 10, "val/loss", 2.5 / (1.0 + i as f32), false));
        }
    }
    out
}

fn hf_file() -> Vec<u8> {
    let mut s = String::from("{\"max_steps\": 200, \"log_history\": [\n");
    for i in 1..=20 {
        s.push_str(&format!(
            "{{\"step\": {}, \"loss\": {}, \"learning_rate\": 1e-4, \"grad_norm\": {}}},\n",
            i * 10,
            if i == 15 {
                "NaN".to_string()
            } else {
                format!("{}", 2.0 / i as f64)
            },
            if i == 16 { "Infinity" } else { "1.5" }
        ));
    }
    s.push_str("{\"step\": 200, \"eval_loss\": 0.5}]}\n");
    s.into_bytes()
}

fn lightning_file() -> Vec<u8> {
    let mut s = String::from("epoch,step,train_loss,val_loss\n");
    for i in 0..30 {
        s.push_str(&format!("{},{},{},\n", i / 10, i * 5, 1.0 / (1.0 + i as f64)));
        if i % 10 == 9 {
            s.push_str(&format!("{},{},,{}\n", i / 10, i * 5, 1.2 / (1.0 + i as f64)));
        }
    }
    s.into_bytes()
}

fn keras_file() -> Vec<u8> {
    let mut s = String::from("epoch,loss,val_loss,accuracy\n");
    for i in 0..12 {
        s.push_str(&format!("{},{},NA,0.5\n", i, 1.0 / (1.0 + i as f64)));
    }
    for i in 0..5 {
        s.push_str(&format!("{},{},{},0.6\n", i, 0.5 / (1.0 + i as f64), 0.6));
    }
    s.into_bytes()
}

fn wandb_file() -> Vec<u8> {
    let mut s = String::from(
        "\"Step\",\"a - train/loss\",\"a - train/loss__MIN\",\"a - train/loss__MAX\",\"b - train/loss\"\n",
    );
    for i in 0..30 {
        s.push_str(&format!("{i},{},{},{},{}\n", 3.0 / (1.0 + i as f64), 1, 4, 2.0));
    }
    s.into_bytes()
}

fn jsonl_file() -> Vec<u8> {
    let mut s = String::new();
    for i in 1..=30 {
        s.push_str(&format!(
            "{{\"step\":{},\"phase\":\"main\",\"train_loss\":{},\"lr\":3e-4,\"grad_norm\":1.7}}\n",
            i * 10,
            2.0 / i as f64
        ));
        if i % 5 == 0 {
            s.push_str(&format!(
                "{{\"step\":{},\"val_loss\":0.5,\"val_accuracy\":0.9}}\n",
                i * 10
            ));
        }
    }
    s.into_bytes()
}

fn write_dir_tree(root: &Path, files: &[(&str, Vec<u8>)]) {
    for (rel, bytes) in files {
        let p = root.join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).expect("mkdir");
        }
        fs::write(p, bytes).expect("write");
    }
}

fn mutate(mut bytes: Vec<u8>, cut: usize, flips: &[(usize, u8)]) -> Vec<u8> {
    let cut = cut % (bytes.len() + 1);
    bytes.truncate(cut);
    for (pos, b) in flips {
        if !bytes.is_empty() {
            let i = pos % bytes.len();
            bytes[i] ^= b;
        }
    }
    bytes
}

/// Reads a (possibly broken) file: must not panic; when it reads, diagnosing must not panic.
fn exercise(path: &Path, format: Option<Format>) {
    if let Ok(runs) = read_path(path, format) {
        for r in &runs {
            let _ = diagnose(r, &DoctorConfig::default());
        }
    }
}

/// `bytes` written as `name` in a fresh directory.
fn file_case(name: &str, bytes: Vec<u8>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join(name);
    fs::write(&p, bytes).expect("write");
    (dir, p)
}

fn flips() -> impl Strategy<Value = Vec<(usize, u8)>> {
    proptest::collection::vec((any::<usize>(), 1u8..=255), 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: contrai_testkit::fuzz_cases(), ..ProptestConfig::default() })]

    #[test]
    fn tensorboard_never_panics(cut in any::<usize>(), f in flips()) {
        let (_d, p) = file_case("events.out.tfevents.1.host", mutate(tb_file(), cut, &f));
        exercise(&p, None);
        exercise(&p, Some(Format::Tensorboard));
    }

    #[test]
    fn wandb_run_file_never_panics(cut in any::<usize>(), f in flips()) {
        let (_d, p) = file_case("run-abc.wandb", mutate(wandb_run_file().bytes().to_vec(), cut, &f));
        exercise(&p, None);
        exercise(&p, Some(Format::Wandb));
    }

    /// Records whose framing and checksums hold but whose data is any bytes: the protobuf
    /// decoding itself is what is tried.
    #[test]
    fn wandb_records_of_any_bytes_never_panic(records in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..8)) {
        let mut file = wandb_run_file();
        for r in &records {
            file.record(r);
        }
        let (_d, p) = file_case("run-abc.wandb", file.bytes().to_vec());
        exercise(&p, None);
    }

    #[test]
    fn tensorboard_truncated_tail_reads_cleanly(cut in any::<usize>()) {
        let full = tb_file();
        let (_d, p) = file_case("events.out.tfevents.2.host", mutate(full, cut, &[]));
        match read_path(&p, None) {
            Ok(runs) => prop_assert!(runs.iter().all(|r| r.points(contrai_doctor::Series::TrainLoss).len() <= 40)),
            // Only a cut before the first complete record leaves nothing to read: an empty file
            // has no metrics, a first record cut short is said to be truncated.
            Err(e) => prop_assert!(
                matches!(e, contrai_doctor::ReadError::NoMetrics { .. })
                    || matches!(&e, contrai_doctor::ReadError::Corrupt { offset: 0, reason, .. } if reason.starts_with("truncated")),
                "{e}"
            ),
        }
    }

    #[test]
    fn hf_never_panics(cut in any::<usize>(), f in flips()) {
        let (_d, p) = file_case("trainer_state.json", mutate(hf_file(), cut, &f));
        exercise(&p, None);
    }

    #[test]
    fn lightning_csv_never_panics(cut in any::<usize>(), f in flips()) {
        let (_d, p) = file_case("metrics.csv", mutate(lightning_file(), cut, &f));
        exercise(&p, None);
    }

    #[test]
    fn keras_csv_never_panics(cut in any::<usize>(), f in flips()) {
        let (_d, p) = file_case("training.log", mutate(keras_file(), cut, &f));
        exercise(&p, None);
        exercise(&p, Some(Format::Csv));
    }

    #[test]
    fn wandb_never_panics(cut in any::<usize>(), f in flips()) {
        let (_d, p) = file_case("wandb_export.csv", mutate(wandb_file(), cut, &f));
        exercise(&p, None);
        exercise(&p, Some(Format::WandbCsv));
    }

    #[test]
    fn jsonl_never_panics(cut in any::<usize>(), f in flips()) {
        let (_d, p) = file_case("metrics.jsonl", mutate(jsonl_file(), cut, &f));
        exercise(&p, None);
    }

    #[test]
    fn mlflow_never_panics(cut in any::<usize>(), f in flips()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut lines = String::new();
        for i in 0..10 {
            lines.push_str(&format!("16286977{i:05} {} {i}\n", 300.0 - i as f64));
        }
        write_dir_tree(dir.path(), &[
            ("mlruns/1/abc/meta.yaml", b"run_name: r1\n".to_vec()),
            ("mlruns/1/abc/params/epochs", b"10".to_vec()),
            ("mlruns/1/abc/metrics/loss", mutate(lines.into_bytes(), cut, &f)),
        ]);
        exercise(&dir.path().join("mlruns"), None);
        exercise(&dir.path().join("mlruns/1/abc/metrics/loss"), None);
    }

    #[test]
    fn burn_never_panics(cut in any::<usize>(), f in flips()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files = Vec::new();
        for e in 1..=6 {
            files.push((format!("train/epoch-{e}/Loss.log"), format!("{},1\n{},1\n", 5.0 - e as f64 * 0.3, 5.0 - e as f64 * 0.3).into_bytes()));
            files.push((format!("valid/epoch-{e}/Loss.log"), format!("{}\n", 4.8 + e as f64 * 0.1).into_bytes()));
        }
        files[3].1 = mutate(files[3].1.clone(), cut, &f);
        let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(p, b)| (p.as_str(), b.clone())).collect();
        write_dir_tree(dir.path(), &refs);
        exercise(dir.path(), None);
        exercise(&dir.path().join("train/epoch-1/Loss.log"), None);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for name in ["events.out.tfevents.3", "trainer_state.json", "x.jsonl", "x.csv", "blob"] {
            let (_d, p) = file_case(name, bytes.clone());
            exercise(&p, None);
        }
    }
}

/// Regression: a bare token right before a delimiter once looped forever in the sanitizer.
#[test]
fn regression_bare_nan_before_comma() {
    let v = contrai_doctor::read::parse_tolerant("{\"a\":NaN,\"b\":-Infinity,\"c\":[Infinity,1]}");
    assert!(v.is_ok());
}

#[test]
fn valid_samples_read() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("events.out.tfevents.9.host", tb_file()),
        ("trainer_state.json", hf_file()),
        ("metrics.csv", lightning_file()),
        ("training.log", keras_file()),
        ("wandb_export.csv", wandb_file()),
        ("metrics.jsonl", jsonl_file()),
    ];
    for (name, bytes) in cases {
        let (_d, p) = file_case(name, bytes);
        let runs = read_path(&p, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!runs.is_empty(), "{name}");
    }
    // Keras appended run restarting its epochs keeps a monotonic x-axis.
    let (_d, p) = file_case("training.log", keras_file());
    let runs = read_path(&p, None).expect("keras");
    let steps: Vec<u64> = runs[0]
        .points(contrai_doctor::Series::TrainLoss)
        .iter()
        .map(|p| p.step)
        .collect();
    assert_eq!(steps.len(), 17);
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
    // HF NaN / Infinity tokens are kept as evidence.
    let (_d, p) = file_case("trainer_state.json", hf_file());
    let runs = read_path(&p, None).expect("hf");
    assert!(
        runs[0]
            .points(contrai_doctor::Series::TrainLoss)
            .iter()
            .any(|p| p.value.is_nan())
    );
    assert_eq!(runs[0].hints.total_steps, Some(200));
    // W&B: one run per column group, __MIN/__MAX ignored.
    let (_d, p) = file_case("wandb_export.csv", wandb_file());
    let runs = read_path(&p, None).expect("wandb");
    assert_eq!(runs.len(), 2);
}

/// A corrupt record in the middle is an error that names the file and the offset.
#[test]
fn tensorboard_corruption_is_reported() {
    let mut bytes = tb_file();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let (_d, p) = file_case("events.out.tfevents.4.host", bytes);
    match read_path(&p, None) {
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("events.out.tfevents.4.host") && msg.contains("byte"),
                "{msg}"
            );
        }
        Ok(_) => panic!("corruption not detected"),
    }
}

/// Regression: a huge step followed by a restart once overflowed the appended-run offset.
#[test]
fn regression_huge_step_then_restart() {
    let (_d, p) = file_case("training.log", b"epoch,loss\n1e300,1\n0,2\n1,3\n".to_vec());
    exercise(&p, None);
}

/// Keras writes `train/` and `validation/` event folders with `epoch_*` tags: one run, epochs.
#[test]
fn keras_tensorboard_split_folders_make_one_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut train = Vec::new();
    let mut val = Vec::new();
    for e in 0..12u64 {
        train.extend(tb_record(e, "epoch_loss", 1.0 / (1.0 + e as f32), false));
        val.extend(tb_record(e, "epoch_loss", 0.5 + 0.05 * e as f32, false));
    }
    write_dir_tree(
        dir.path(),
        &[
            ("fit/run1/train/events.out.tfevents.1.host.v2", train),
            ("fit/run1/validation/events.out.tfevents.1.host.v2", val),
        ],
    );
    let runs = read_path(&dir.path().join("fit"), None).expect("read");
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(r.name, "run1");
    assert_eq!(r.points(contrai_doctor::Series::TrainLoss).len(), 12);
    assert_eq!(r.points(contrai_doctor::Series::ValLoss).len(), 12);
    assert_eq!(r.hints.x_unit, contrai_doctor::XUnit::Epoch);
    let rep = diagnose(r, &DoctorConfig::default());
    assert!(
        rep.findings
            .iter()
            .any(|f| f.label == contrai_doctor::Label::Overfitting),
        "{:?}",
        rep.findings
    );
}

#[test]
fn a_trainers_arguments_text_summary_gives_the_run_its_setup() {
    let (_d, p) = file_case("events.out.tfevents.5.host", tb_file());
    let runs = read_path(&p, None).unwrap();
    let setup = &runs[0].hints.setup;
    assert_eq!(setup.schedule, Some(contrai_doctor::LrSchedule::Linear));
    assert_eq!((setup.peak_lr, setup.batch_size), (Some(5e-5), Some(8)));
    assert_eq!(setup.settings[0].file, "TensorBoard args/text_summary");
    // The text summary is no metric: the scalars read as before.
    assert_eq!(runs[0].series.len(), 2, "{:?}", runs[0].series.keys());
}
