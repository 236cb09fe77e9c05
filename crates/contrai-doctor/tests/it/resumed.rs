//! The resume rule (`resume_discontinuity`) on real published logs that resumed, each labelled
//! by hand in `tests/data/resumed/SOURCES.md` before the doctor ran on it; on real logs that did
//! not resume; and on planted logs written through the readers. Every test asserts a finding the
//! rule alone makes, so each fails when the rule is removed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use contrai_doctor::{
    Boundary, Break, Confidence, Detail, DoctorConfig, Finding, Label, Marker, Reading, Severity, diagnose,
    read_path,
};
use contrai_testkit::Noise;

/// A fixture under `tests/data/resumed/`.
fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/resumed")
        .join(rel)
}

/// The resume finding of the one run at `path`, if any.
fn resume_finding(path: &Path) -> Option<Finding> {
    let runs = read_path(path, None).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(runs.len(), 1, "{}", path.display());
    diagnose(&runs[0], &DoctorConfig::default())
        .findings
        .into_iter()
        .find(|f| f.label == Label::ResumeDiscontinuity)
}

/// The finding of a resumed fixture, which must exist.
fn found(rel: &str) -> Finding {
    resume_finding(&data(rel)).unwrap_or_else(|| panic!("{rel}: no resume_discontinuity"))
}

/// The judged boundaries of a resume finding.
fn boundaries(f: &Finding) -> &[Boundary] {
    match &f.detail {
        Some(Detail::Resume(r)) => &r.boundaries,
        _ => panic!("resume finding without its detail: {f:?}"),
    }
}

/// The boundary at a file line, which must have been reported.
fn at_line(f: &Finding, line: usize) -> &Boundary {
    boundaries(f)
        .iter()
        .find(|b| b.line == Some(line))
        .unwrap_or_else(|| panic!("no boundary at line {line}: {:#?}", boundaries(f)))
}

/// The file steps and reading of every reported boundary, in log order.
fn summary(f: &Finding) -> Vec<(u64, u64, Reading)> {
    boundaries(f)
        .iter()
        .map(|b| (b.step_before, b.step_after, b.reading))
        .collect()
}

#[test]
fn keras_weights_reloaded_into_a_fresh_run() {
    let f = found("keras-irfanet-weights-reload/training_logs191017(2).log");
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(summary(&f), vec![(34, 0, Reading::WeightsOnly)]);
    let b = at_line(&f, 37);
    assert!(
        b.breaks.contains(&Break::StepBack) && b.breaks.contains(&Break::LossJump),
        "{b:?}"
    );
    // The loss after is the level the first segment had at epoch 7 (the weights file it loaded).
    assert!(f.recommendation.contains("step 7 before"), "{}", f.recommendation);
    assert_eq!(b.confidence, Confidence::High);
}

#[test]
fn keras_three_restarts_in_one_log() {
    let f = found("keras-irfanet-three-restarts/training_logs221017.log");
    assert_eq!(
        summary(&f),
        vec![
            (132, 0, Reading::WeightsOnly),
            (3, 0, Reading::FromScratch),
            (4, 0, Reading::FromScratch),
        ]
    );
    assert_eq!(f.step, 0);
    assert_eq!(f.evidence.get("line"), Some(&135.0));
    assert_eq!(at_line(&f, 144).breaks, vec![Break::StepBack, Break::LossJump]);
}

#[test]
fn keras_second_run_appended_to_the_log() {
    let f = found("keras-irfanet-new-run-appended/training_logs211017.log");
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(summary(&f), vec![(62, 0, Reading::FromScratch)]);
    assert_eq!(at_line(&f, 65).breaks, vec![Break::StepBack]);
}

#[test]
fn tensorboard_new_event_file_with_reloaded_weights() {
    let f = found("tb-irfanet-weights-reload/logs191017(2)");
    assert_eq!(summary(&f), vec![(34, 0, Reading::WeightsOnly)]);
    let b = &boundaries(&f)[0];
    assert_eq!(b.marker, Some(Marker::NewFile));
    assert!(b.breaks.contains(&Break::LossJump), "{b:?}");
}

#[test]
fn pretraining_resumed_without_its_state_then_from_a_good_checkpoint() {
    let f = found("csv-chat-hamner-pretrain/metrics.csv");
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(
        summary(&f),
        vec![
            (49100, 49050, Reading::Broken),
            (54350, 54050, Reading::Broken),
            (90100, 90050, Reading::Broken),
            (95550, 90050, Reading::Consistent),
            (95300, 90050, Reading::Consistent),
        ]
    );
    for line in [77, 184, 906] {
        let b = at_line(&f, line);
        assert_eq!(b.breaks, vec![Break::StepBack, Break::LossJump], "line {line}");
        // The LR went on exactly as the schedule had it at the resumed step.
        assert_eq!(b.lr_after, b.lr_expected, "line {line}");
    }
    assert_eq!(f.step, 49050);
    assert_eq!(f.evidence.get("loss_expected"), Some(&5.07881));
}

#[test]
fn curriculum_phase_restarted_then_resumed() {
    let f = found("csv-chat-hamner-curriculum/curriculum_metrics.csv");
    assert_eq!(
        summary(&f),
        vec![
            (1900, 50, Reading::FromScratch),
            (6850, 2050, Reading::Consistent)
        ]
    );
    let b = at_line(&f, 40);
    assert_eq!((b.lr_before, b.lr_after), (Some(9.222506e-05), Some(1e-05)));
    assert_eq!(f.severity, Severity::Warning);
}

#[test]
fn preempted_jobs_that_resumed_cleanly_are_information() {
    let f = found("jsonl-slm-training-preempted/metrics.jsonl");
    assert_eq!(f.severity, Severity::Info);
    let lines: Vec<Option<usize>> = boundaries(&f).iter().map(|b| b.line).collect();
    assert_eq!(lines, vec![Some(2), Some(4), Some(383), Some(386)]);
    for line in [383, 386] {
        let b = at_line(&f, line);
        assert_eq!(
            (b.step_before > b.step_after, b.reading),
            (true, Reading::Consistent)
        );
        assert_eq!(b.breaks, vec![Break::StepBack]);
    }
}

#[test]
fn two_writers_and_one_clean_resume() {
    let f = found("jsonl-llamafactory-two-writers-resumed/trainer_log.jsonl");
    assert_eq!(f.severity, Severity::Info);
    assert_eq!(summary(&f), vec![(5220, 5010, Reading::Consistent)]);
    assert_eq!(boundaries(&f)[0].line, Some(87));
}

#[test]
fn real_logs_that_did_not_resume_have_no_finding() {
    for rel in [
        "control-keras-irfanet/training_191017.log",
        "control-tb-irfanet/logs191017",
        "control-csv-chat-hamner-v4-base/pretrain_v4_base_metrics.csv",
        "control-csv-chat-hamner-v3-phases/v3_metrics.csv",
        "control-jsonl-llamafactory-medical/trainer_log.jsonl",
    ] {
        assert_eq!(resume_finding(&data(rel)), None, "{rel}");
    }
    // The same readers do report a resumed log of each format.
    found("keras-irfanet-new-run-appended/training_logs211017.log");
    found("tb-irfanet-weights-reload/logs191017(2)");
    found("jsonl-llamafactory-two-writers-resumed/trainer_log.jsonl");
}

#[test]
fn the_projects_eval_runs_did_not_resume() {
    if let Some(dir) = contrai_testkit::shared("eval/doctor/cases") {
        let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("list cases")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        cases.sort();
        for case in cases {
            for run in read_path(&case, None).unwrap_or_default() {
                let rep = diagnose(&run, &DoctorConfig::default());
                let resumed = rep.findings.iter().any(|f| f.label == Label::ResumeDiscontinuity);
                assert!(!resumed, "{} / {}: {:?}", case.display(), run.name, rep.findings);
            }
        }
    }
    found("keras-irfanet-weights-reload/training_logs191017(2).log");
}

/// A loss curve with 2 % noise.
fn loss_at(step: u64, n: &mut Noise) -> f64 {
    (0.5 + 2.0 * (-(step as f64) / 800.0).exp()) * (1.0 + 0.02 * n.next())
}

/// Linear warmup over 100 steps to 5e-5, then linear decay to 0 at `total`.
fn linear_lr(step: u64, total: u64) -> f64 {
    let peak = 5e-5;
    if step < 100 {
        peak * step as f64 / 100.0
    } else {
        peak * total.saturating_sub(step) as f64 / (total - 100) as f64
    }
}

/// One `log_history` entry.
fn hf_entry(step: u64, loss: f64, lr: f64) -> String {
    format!(
        r#"{{"epoch": {:.3}, "learning_rate": {lr:e}, "loss": {loss:.4}, "step": {step}}}"#,
        step as f64 / 500.0
    )
}

/// Writes a trainer_state.json with these entries into a temporary folder.
fn trainer_state(dir: &Path, entries: &[String]) -> PathBuf {
    let path = dir.join("trainer_state.json");
    let text = format!(r#"{{"global_step": 0, "log_history": [{}]}}"#, entries.join(", "));
    std::fs::write(&path, text).expect("write trainer_state.json");
    path
}

#[test]
fn planted_hf_lr_restarts_its_warmup_at_a_resume() {
    let mut n = Noise(11);
    // A job logged to step 600 and its log was kept; a new Trainer resumed from
    // checkpoint-400's weights with a fresh scheduler, which warms up again.
    let mut entries: Vec<String> = (1..=60)
        .map(|i| i * 10)
        .map(|s| hf_entry(s, loss_at(s, &mut n), linear_lr(s, 1000)))
        .collect();
    entries.extend((41..=100).map(|i| i * 10).map(|s| {
        let fresh = s - 400;
        hf_entry(s, loss_at(s, &mut n), linear_lr(fresh, 1000))
    }));
    let dir = tempfile::tempdir().expect("tempdir");
    let f = resume_finding(&trainer_state(dir.path(), &entries)).expect("resume finding");
    assert_eq!(summary(&f), vec![(600, 410, Reading::Broken)]);
    assert_eq!(
        boundaries(&f)[0].breaks,
        vec![Break::StepBack, Break::LrRestartWarmup]
    );
    assert!(
        f.recommendation.contains("resume_from_checkpoint"),
        "{}",
        f.recommendation
    );
}

#[test]
fn planted_hf_lr_jumps_after_a_closing_summary() {
    let mut n = Noise(5);
    // train() ran to step 1000, then a longer schedule resumed from the final state: the LR
    // of the new, longer linear decay jumps up against the old one.
    let mut entries: Vec<String> = (1..=100)
        .map(|i| i * 10)
        .map(|s| hf_entry(s, loss_at(s, &mut n), linear_lr(s, 1000)))
        .collect();
    entries.push(
        r#"{"epoch": 2.0, "step": 1000, "total_flos": 1.0, "train_loss": 0.9, "train_runtime": 60.0}"#
            .to_string(),
    );
    entries.extend(
        (101..=150)
            .map(|i| i * 10)
            .map(|s| hf_entry(s, loss_at(s, &mut n), linear_lr(s, 2000))),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let f = resume_finding(&trainer_state(dir.path(), &entries)).expect("resume finding");
    let b = &boundaries(&f)[0];
    assert_eq!(
        (b.step_before, b.step_after, b.marker),
        (1000, 1010, Some(Marker::RunSummary))
    );
    assert_eq!(
        (b.reading, b.breaks.clone()),
        (Reading::Broken, vec![Break::LrJump])
    );
    assert_eq!(f.severity, Severity::Warning);
}

/// A LLaMA-Factory `trainer_log.jsonl` logged every 10 steps to step 700 under a cosine over
/// 41,000 steps, 42 steps an epoch; from step 440 (`relaunch`) the job was launched again on a
/// new dataset (222 steps an epoch) and schedule (222,000 steps), its steps, LR and loss going
/// on as they were.
fn llama_factory_log(relaunch: bool) -> String {
    let mut n = Noise(3);
    let mut out = String::new();
    for s in (1..=70).map(|i| i * 10) {
        let (total, per_epoch) = if relaunch && s >= 440 {
            (222_000, 222.0)
        } else {
            (41_000, 42.0)
        };
        let lr = 2.5e-5 * (1.0 + (std::f64::consts::PI * s as f64 / total as f64).cos());
        let row = format!(
            r#"{{"current_steps": {s}, "total_steps": {total}, "loss": {:.4}, "learning_rate": {lr:e}, "epoch": {:.2}}}"#,
            loss_at(s, &mut n),
            s as f64 / per_epoch
        );
        writeln!(out, "{row}").unwrap();
    }
    out
}

#[test]
fn planted_relaunch_with_a_new_plan_is_a_warning_and_the_same_plan_is_no_boundary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("trainer_log.jsonl");
    std::fs::write(&path, llama_factory_log(true)).expect("write");
    let f = resume_finding(&path).expect("resume finding");
    let b = &boundaries(&f)[0];
    assert_eq!(
        (b.step_before, b.step_after, b.marker, b.reading),
        (430, 440, Some(Marker::Relaunch), Reading::Broken)
    );
    assert_eq!(b.breaks, vec![Break::NewPlan]);
    assert_eq!(f.severity, Severity::Warning);
    // The same log written by one job: nothing to report.
    std::fs::write(&path, llama_factory_log(false)).expect("write");
    assert!(resume_finding(&path).is_none());
}

/// A Lightning CSVLogger `metrics.csv`: a train row per 50 steps, a validation row per 500.
fn lightning_csv(rows: &[(u64, f64, f64)]) -> String {
    let mut out = "epoch,lr-AdamW,step,train_loss_step,val_loss\n".to_string();
    for &(step, loss, lr) in rows {
        let _ = writeln!(out, "{},{lr:e},{step},{loss:.5},", step / 500);
        if step % 500 == 499 {
            let _ = writeln!(out, "{},,{step},,{:.5}", step / 500, loss * 1.1);
        }
    }
    out
}

/// Train rows from `from` to `to`, every 50 steps, on a cosine-like decay; the loss times `jump`.
fn rows(from: u64, to: u64, jump: f64, n: &mut Noise) -> Vec<(u64, f64, f64)> {
    (from..=to)
        .step_by(50)
        .map(|s| (s, jump * loss_at(s, n), 1e-3 * (1.0 - s as f64 / 8000.0)))
        .collect()
}

/// Diagnoses a planted Lightning log resumed at step 2499 after reaching 4999.
fn lightning_resumed(jump: f64) -> Option<Finding> {
    let mut n = Noise(3);
    let mut all = rows(49, 4999, 1.0, &mut n);
    all.extend(rows(2499, 5999, jump, &mut n));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("metrics.csv");
    std::fs::write(&path, lightning_csv(&all)).expect("write metrics.csv");
    resume_finding(&path)
}

#[test]
fn planted_lightning_step_goes_back() {
    let f = lightning_resumed(1.0).expect("resume finding");
    assert_eq!(f.severity, Severity::Info);
    assert_eq!(summary(&f), vec![(4999, 2499, Reading::Consistent)]);
    assert_eq!(boundaries(&f)[0].breaks, vec![Break::StepBack]);
}

#[test]
fn planted_loss_jump_at_the_boundary() {
    let f = lightning_resumed(1.6).expect("resume finding");
    assert_eq!(f.severity, Severity::Warning);
    let b = &boundaries(&f)[0];
    assert_eq!(
        (b.step_before, b.step_after, b.reading),
        (4999, 2499, Reading::Broken)
    );
    assert_eq!(b.breaks, vec![Break::StepBack, Break::LossJump]);
    assert!(b.loss_z.is_some_and(|z| z > 6.0), "{b:?}");
}

/// MultiStep decay: the LR times 0.1 at steps 1000 and 2000.
fn multistep_lr(step: u64) -> f64 {
    1e-3 * 0.1f64.powi(i32::try_from(step / 1000).unwrap_or(i32::MAX))
}

#[test]
fn planted_multistep_decay_is_not_a_resume() {
    let mut n = Noise(17);
    let entries: Vec<String> = (1..=300)
        .map(|i| i * 10)
        .map(|s| hf_entry(s, loss_at(s, &mut n), multistep_lr(s)))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(resume_finding(&trainer_state(dir.path(), &entries)), None);
    // The same decay resumed with a fresh scheduler (the LR back at 1e-3 at step 2510) is.
    let mut resumed = entries[..250].to_vec();
    resumed.extend(
        (251..=300)
            .map(|i| i * 10)
            .map(|s| hf_entry(s, loss_at(s, &mut n), 1e-3)),
    );
    resumed.insert(
        250,
        r#"{"step": 2500, "train_runtime": 1.0, "train_loss": 1.0}"#.to_string(),
    );
    let f = resume_finding(&trainer_state(dir.path(), &resumed)).expect("resume finding");
    assert_eq!(boundaries(&f)[0].breaks, vec![Break::LrRestartPeak]);
}

#[test]
fn planted_keras_log_with_many_appended_runs_reports_each() {
    // Six runs of eight epochs appended to one CSVLogger file: too many cuts for a logger's
    // quirk, yet each one goes back eight epochs and the log never passes it again at once.
    let mut n = Noise(23);
    let mut text = "epoch,loss,val_loss\n".to_string();
    for _ in 0..6 {
        for e in 0..8u64 {
            let loss = loss_at(100 * e, &mut n);
            let _ = writeln!(text, "{e},{loss:.5},{:.5}", loss * 1.2);
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("training.log");
    std::fs::write(&path, text).expect("write training.log");
    let f = resume_finding(&path).expect("resume finding");
    let all = summary(&f);
    assert_eq!(all.len(), 5, "{all:?}");
    assert!(all.iter().all(|b| *b == (7, 0, Reading::FromScratch)), "{all:?}");
}

#[test]
fn planted_csv_header_written_again_marks_a_segment() {
    // A logger appending to its CSV writes the header again when the job restarts; the epochs
    // go on, but a fresh scheduler puts the LR back at its peak.
    let mut n = Noise(29);
    let lr = |e: u64| 1e-3 * 0.5 * (1.0 + (std::f64::consts::PI * e as f64 / 40.0).cos());
    let mut text = "epoch,train_loss,lr\n".to_string();
    for e in 0..20u64 {
        let _ = writeln!(text, "{e},{:.5},{:e}", loss_at(100 * e, &mut n), lr(e));
    }
    text.push_str("epoch,train_loss,lr\n");
    for e in 20..30u64 {
        let _ = writeln!(text, "{e},{:.5},{:e}", loss_at(100 * e, &mut n), lr(e - 20));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("summary.csv");
    std::fs::write(&path, text).expect("write summary.csv");
    let f = resume_finding(&path).expect("resume finding");
    let b = &boundaries(&f)[0];
    assert_eq!((b.line, b.marker), (Some(23), Some(Marker::RepeatedHeader)));
    assert_eq!((b.step_before, b.step_after), (19, 20));
    assert_eq!(
        (b.reading, b.breaks.clone()),
        (Reading::Broken, vec![Break::LrRestartPeak])
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Any step order and any values: the rule never panics, and every boundary it reports is
    /// one the log wrote (its step after is a logged step, its line a line of the file).
    #[test]
    fn any_step_order_never_panics(
        rows in proptest::collection::vec((0u64..40, -1.0f64..10.0, 0u8..8), 1..120),
    ) {
        let mut text = String::new();
        for (step, v, kind) in &rows {
            let value = match kind {
                0 => "NaN".to_string(),
                1 => "0".to_string(),
                _ => format!("{v}"),
            };
            let _ = writeln!(text, r#"{{"step": {step}, "loss": {value}, "lr": {}}}"#, v.abs() * 1e-4);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("metrics.jsonl");
        std::fs::write(&path, text).expect("write metrics.jsonl");
        if let Ok(runs) = read_path(&path, None) {
            for run in &runs {
                let rep = diagnose(run, &DoctorConfig::default());
                for f in rep.findings.iter().filter(|f| f.label == Label::ResumeDiscontinuity) {
                    for b in boundaries(f) {
                        proptest::prop_assert!(rows.iter().any(|r| r.0 == b.step_after));
                        proptest::prop_assert!(b.line.is_some_and(|l| l >= 1 && l <= rows.len()));
                    }
                }
            }
        }
    }
}

#[test]
fn planted_keras_history_whose_lr_jumps_back_to_a_level_it_held() {
    // A PyTorch loop's history JSON (ReduceLROnPlateau halvings 5e-4 -> 6.25e-5 over 43
    // epochs), resumed from an earlier checkpoint's optimizer without its scheduler: at epoch 43
    // the LR is 2.5e-4 again, the level of epochs 13-33, while the epoch index goes on.
    let history = |resumed: bool| {
        let lr: Vec<f64> = (0..60)
            .map(|e| match e {
                0..=12 => 5e-4,
                13..=33 => 2.5e-4,
                34..=39 => 1.25e-4,
                43.. if resumed => 2.5e-4,
                _ => 6.25e-5,
            })
            .collect();
        let loss: Vec<f64> = (0..60).map(|e| 0.9 * (-(e as f64) / 30.0).exp() + 0.3).collect();
        let val: Vec<f64> = loss.iter().map(|l| l + 0.1).collect();
        format!(r#"{{"loss": {loss:?}, "val_loss": {val:?}, "lr": {lr:?}}}"#)
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("training_history.json");
    std::fs::write(&path, history(true)).expect("write");
    let f = resume_finding(&path).expect("a resume finding");
    assert!(
        boundaries(&f).iter().any(|b| b.marker == Some(Marker::LrRestart)),
        "{f:?}"
    );
    // The same schedule halving on to the end: no boundary.
    std::fs::write(&path, history(false)).expect("write");
    assert!(resume_finding(&path).is_none());
}
