//! Patterns of real published runs the doctor missed (issue 30), each written as files a
//! framework writes, read through `read_path`: the task from the files beside a log, W&B exports
//! split a metric a file, LLaMA-Factory's two logs of one run, a noisy rise after the minimum, a
//! short classifier's validation settling at ln 2.

mod chance;
mod curves;
mod frozen;
mod readers;
mod schedules;

use contrai_doctor::{Confidence, Detail, DoctorConfig, Finding, Label, Report, Task, diagnose, read_path};
use std::fs;
use std::path::Path;

pub(super) fn reports(dir: &Path) -> Vec<Report> {
    let runs = read_path(dir, None).unwrap();
    runs.iter()
        .map(|r| diagnose(r, &DoctorConfig::default()))
        .collect()
}

/// The reports of a fresh folder holding `files` (name, contents).
pub(super) fn reports_of(files: &[(&str, String)]) -> Vec<Report> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        fs::write(dir.path().join(name), text).unwrap();
    }
    reports(dir.path())
}

/// The sources of `rs`, for a failure's message.
pub(super) fn sources(rs: &[Report]) -> Vec<&str> {
    rs.iter().map(|r| r.source.as_str()).collect()
}

pub(super) fn labels(r: &Report) -> Vec<Label> {
    r.findings.iter().map(|f| f.label).collect()
}

/// Whether a finding of `r` carries the evidence `key` (which rule spoke, where labels share).
pub(super) fn has_evidence(r: &Report, key: &str) -> bool {
    r.findings.iter().any(|f| f.evidence.contains_key(key))
}

/// The finding of `label` in `r` (the test fails, naming what was found, without one).
pub(super) fn finding(r: &Report, label: Label) -> &Finding {
    r.findings
        .iter()
        .find(|f| f.label == label)
        .unwrap_or_else(|| panic!("no {label}: {:?}", labels(r)))
}

/// A trainer_state.json of these `log_history` entries, planned for `max_steps`.
pub(super) fn history(max_steps: u64, rows: &[String]) -> String {
    format!(
        r#"{{"max_steps": {max_steps}, "log_history": [{}]}}"#,
        rows.join(", ")
    )
}

/// A trainer_state.json: `train` (step, loss) and `eval` (step, eval_loss, eval_accuracy).
pub(super) fn trainer_state(
    train: &[(u64, f64)],
    eval: &[(u64, f64, Option<f64>)],
    max_steps: u64,
) -> String {
    let mut rows: Vec<String> = train
        .iter()
        .map(|(s, l)| format!(r#"{{"step": {s}, "loss": {l}, "learning_rate": 2e-5}}"#))
        .collect();
    for (s, l, a) in eval {
        let acc = a
            .map(|a| format!(r#", "eval_accuracy": {a}"#))
            .unwrap_or_default();
        rows.push(format!(r#"{{"step": {s}, "eval_loss": {l}{acc}}}"#));
    }
    history(max_steps, &rows)
}

/// Validation swings ±10 % and after its minimum (step 800) sits 10-30 % above it for seven
/// evaluations while the training loss falls 85 %: a Trainer state of 2200 steps.
pub(super) fn noisy_rise() -> String {
    let val = [
        0.314, 0.255, 0.267, 0.232, 0.303, 0.272, 0.254, 0.283, 0.294, 0.294, 0.288,
    ];
    let eval: Vec<(u64, f64, Option<f64>)> = val
        .iter()
        .enumerate()
        .map(|(i, v)| ((i as u64 + 1) * 200, *v, None))
        .collect();
    let train: Vec<(u64, f64)> = (1..=22)
        .map(|i| (i * 100, 0.46 * (-(i as f64) / 8.0).exp()))
        .collect();
    trainer_state(&train, &eval, 2200)
}

/// A falling validation loss with a small set's noise: an evaluation's values (step, loss).
pub(super) fn noisy_falling_eval(n: u64, swing: f64) -> Vec<(u64, f64, Option<f64>)> {
    (1..=n)
        .map(|i| {
            let level = 1.2 * (-(i as f64) / n as f64).exp();
            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
            (i * 100, level * (1.0 + sign * swing), None)
        })
        .collect()
}

/// An MLflow run folder under `root` with `metrics` (key, lines `timestamp value step`) and
/// `params` (key, value).
pub(super) fn mlflow_run(root: &Path, metrics: &[(&str, String)], params: &[(&str, &str)]) {
    let run = root.join("mlruns").join("1").join("0123abcd");
    fs::create_dir_all(run.join("metrics")).unwrap();
    fs::create_dir_all(run.join("params")).unwrap();
    fs::write(run.join("meta.yaml"), "run_name: trial\n").unwrap();
    for (k, text) in metrics {
        fs::write(run.join("metrics").join(k), text).unwrap();
    }
    for (k, v) in params {
        fs::write(run.join("params").join(k), v).unwrap();
    }
}

/// MLflow metric lines `timestamp value step` for steps `0..n` of `f`.
pub(super) fn mlflow_lines(n: u64, f: &dyn Fn(f64) -> f64) -> String {
    (0..n)
        .map(|i| format!("{} {} {i}\n", 1_600_000_000_000u64 + 1000 * i, f(i as f64)))
        .collect()
}

/// A Trainer state of three epochs of 100 steps under a cosine LR: `loss(step)`.
pub(super) fn three_epochs(loss: &dyn Fn(f64) -> f64) -> String {
    let rows: Vec<String> = (1..=300u64)
        .map(|s| {
            let lr = 2.5e-5 * (1.0 + (std::f64::consts::PI * s as f64 / 300.0).cos());
            format!(
                r#"{{"step": {s}, "epoch": {}, "loss": {}, "learning_rate": {lr}}}"#,
                s as f64 / 100.0,
                loss(s as f64)
            )
        })
        .collect();
    history(300, &rows)
}

/// A deterministic draw in [0, 1) for step `i` (a per-batch metric's noise).
pub(super) fn jitter(i: u64) -> f64 {
    let x = i
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// LLaMA-Factory's `trainer_log.jsonl` of a loss only (no LR logged): `n` lines of `loss(step)`.
pub(super) fn loss_only_log(n: u64, loss: &dyn Fn(f64) -> f64) -> String {
    (1..=n)
        .map(|s| {
            let l = loss(s as f64);
            format!("{{\"current_steps\": {s}, \"total_steps\": {n}, \"loss\": {l}}}\n")
        })
        .collect()
}
