//! Patterns of real published runs the doctor missed (issue 30), each written as files a
//! framework writes, read through `read_path`: the task from the files beside a log, W&B exports
//! split a metric a file, LLaMA-Factory's two logs of one run, a noisy rise after the minimum, a
//! short classifier's validation settling at ln 2.

use std::fs;
use std::path::Path;

use contrai_doctor::{Confidence, Detail, DoctorConfig, Finding, Label, Report, Task, diagnose, read_path};

fn reports(dir: &Path) -> Vec<Report> {
    let runs = read_path(dir, None).unwrap();
    runs.iter()
        .map(|r| diagnose(r, &DoctorConfig::default()))
        .collect()
}

/// The reports of a fresh folder holding `files` (name, contents).
fn reports_of(files: &[(&str, String)]) -> Vec<Report> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        fs::write(dir.path().join(name), text).unwrap();
    }
    reports(dir.path())
}

/// The sources of `rs`, for a failure's message.
fn sources(rs: &[Report]) -> Vec<&str> {
    rs.iter().map(|r| r.source.as_str()).collect()
}

fn labels(r: &Report) -> Vec<Label> {
    r.findings.iter().map(|f| f.label).collect()
}

/// The finding of `label` in `r` (the test fails, naming what was found, without one).
fn finding(r: &Report, label: Label) -> &Finding {
    r.findings
        .iter()
        .find(|f| f.label == label)
        .unwrap_or_else(|| panic!("no {label}: {:?}", labels(r)))
}

/// A trainer_state.json: `train` (step, loss) and `eval` (step, eval_loss, eval_accuracy).
fn trainer_state(train: &[(u64, f64)], eval: &[(u64, f64, Option<f64>)], max_steps: u64) -> String {
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
    format!(
        r#"{{"max_steps": {max_steps}, "log_history": [{}]}}"#,
        rows.join(", ")
    )
}

#[test]
fn a_language_models_loss_near_ln_5_is_no_chance_level_and_a_classifiers_k_comes_from_its_config() {
    // Flat at ln 5 for 300 steps with a flat eval: the same numbers, two tasks.
    let train: Vec<(u64, f64)> = (1..=30)
        .map(|i| (i * 10, 5f64.ln() * (1.0 + 0.003 * ((i % 3) as f64 - 1.0))))
        .collect();
    let eval: Vec<(u64, f64, Option<f64>)> = (1..=6).map(|i| (i * 50, 5f64.ln(), None)).collect();
    let state = trainer_state(&train, &eval, 300);
    let lm = tempfile::tempdir().unwrap();
    fs::write(lm.path().join("trainer_state.json"), &state).unwrap();
    fs::write(
        lm.path().join("config.json"),
        r#"{"architectures": ["Qwen2ForCausalLM"]}"#,
    )
    .unwrap();
    let r = &reports(lm.path())[0];
    assert_eq!(r.task, Task::LanguageModel);
    assert_eq!(r.task_source.as_deref(), Some("config.json"));
    assert!(!labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
    let cls = tempfile::tempdir().unwrap();
    let ckpt = cls.path().join("checkpoint-300");
    fs::create_dir(&ckpt).unwrap();
    fs::write(ckpt.join("trainer_state.json"), &state).unwrap();
    // The config one folder up, as a Trainer's output directory holds it.
    let config = r#"{"architectures": ["BertForSequenceClassification"], "id2label": {"0": "a", "1": "b", "2": "c", "3": "d", "4": "e"}}"#;
    fs::write(cls.path().join("config.json"), config).unwrap();
    let r = &reports(cls.path())[0];
    assert_eq!((r.task, r.classes), (Task::Classification, Some(5)));
    assert!(
        r.task_line().starts_with("classification, 5 classes"),
        "{}",
        r.task_line()
    );
    assert!(labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
}

#[test]
fn a_short_classifiers_validation_settling_at_ln_2_from_above_is_stuck_at_chance() {
    // 14 epochs of 14 steps: the eval loss comes down from 0.79 to ln 2, accuracy fixed at 6/14.
    let eval: Vec<(u64, f64, Option<f64>)> = (1..=14)
        .map(|e| {
            (
                e * 14,
                2f64.ln() + 0.1 * (-(e as f64) / 3.0).exp(),
                Some(6.0 / 14.0),
            )
        })
        .collect();
    let r = &reports_of(&[("trainer_state.json", trainer_state(&[], &eval, 210))])[0];
    assert_eq!(r.task, Task::Classification, "its accuracy says so");
    assert!(labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
}

#[test]
fn a_classifier_that_learned_and_fell_back_to_its_prior_is_stuck_at_chance() {
    // A binary classifier (config.json) learns to 0.35 by step 300, then sits at 0.67 (the
    // entropy of a 60/40 prior) with noise for the last 40 % of the run.
    let mut x = 7u64;
    let train: Vec<(u64, f64)> = (1..=50)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let noise = 0.03 * ((x % 1000) as f64 / 500.0 - 1.0);
            let level = if i <= 30 {
                0.69 - 0.34 * i as f64 / 30.0
            } else {
                0.673
            };
            (10 * i, level + noise)
        })
        .collect();
    let config =
        r#"{"architectures": ["BertForSequenceClassification"], "id2label": {"0": "obj", "1": "subj"}}"#
            .to_string();
    let r = &reports_of(&[
        ("trainer_state.json", trainer_state(&train, &[], 500)),
        ("config.json", config),
    ])[0];
    let f = finding(r, Label::StuckAtChance);
    assert!(
        f.recommendation.contains("fell back to chance"),
        "{}",
        f.recommendation
    );
    // The same run that stays learned is not.
    let kept: Vec<(u64, f64)> = train
        .iter()
        .map(|&(s, v)| (s, if s > 300 { v - 0.33 } else { v }))
        .collect();
    let r = &reports_of(&[
        ("trainer_state.json", trainer_state(&kept, &[], 500)),
        (
            "config.json",
            r#"{"architectures": ["BertForSequenceClassification"], "id2label": {"0": "obj", "1": "subj"}}"#
                .to_string(),
        ),
    ])[0];
    assert!(!labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
}

/// Validation swings ±10 % and after its minimum (step 800) sits 10-30 % above it for seven
/// evaluations while the training loss falls 85 %: a Trainer state of 2200 steps.
fn noisy_rise() -> String {
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

#[test]
fn a_noisy_rise_after_the_minimum_is_overfitting_and_the_advice_names_the_raw_best() {
    let r = &reports_of(&[("trainer_state.json", noisy_rise())])[0];
    let f = finding(r, Label::Overfitting);
    assert_eq!(
        f.evidence["best_step"], 800.0,
        "the raw best evaluation, not the smoothed curve's"
    );
    assert!(
        f.recommendation.contains("best checkpoint was step 800"),
        "{}",
        f.recommendation
    );
}

#[test]
fn the_advice_resumes_from_a_checkpoint_the_runs_folder_holds() {
    // A Trainer's output directory: the state in its last checkpoint, the others beside it.
    let resume = |saved: &[u64]| {
        let out = tempfile::tempdir().unwrap();
        for s in saved {
            fs::create_dir(out.path().join(format!("checkpoint-{s}"))).unwrap();
        }
        fs::write(
            out.path().join("checkpoint-2200").join("trainer_state.json"),
            noisy_rise(),
        )
        .unwrap();
        let r = reports(&out.path().join("checkpoint-2200")).remove(0);
        let f = r
            .findings
            .into_iter()
            .find(|f| f.label == Label::Overfitting)
            .unwrap();
        (
            f.recommendation,
            f.evidence.get("resume_checkpoint_step").copied(),
        )
    };
    let (rec, step) = resume(&[600, 1200, 2200]);
    assert!(
        rec.contains("Resume from checkpoint-600 (step 600, the last saved before it)"),
        "{rec}"
    );
    assert_eq!(step, Some(600.0));
    let (rec, _) = resume(&[400, 800, 2200]);
    assert!(rec.contains("Resume from checkpoint-800 with"), "{rec}");
    let (rec, _) = resume(&[1000, 2200]);
    assert!(
        rec.contains("checkpoint-1000 (step 1000: none was kept at or before step 800)"),
        "{rec}"
    );
}

#[test]
fn a_wandb_export_split_a_metric_a_file_is_one_run() {
    let train: Vec<String> = (1..=200)
        .map(|s| format!("{s},{}", 1.5 * (-(s as f64) / 40.0).exp() + 0.05))
        .collect();
    let val: Vec<String> = (1..=10)
        .map(|e| {
            format!(
                "{},{}",
                e * 20,
                [1.0, 0.6, 0.4, 0.35, 0.37, 0.40, 0.44, 0.47, 0.50, 0.53][e as usize - 1]
            )
        })
        .collect();
    let rs = reports_of(&[
        (
            "train_loss.csv",
            format!("Step,run-7 - train/loss\n{}\n", train.join("\n")),
        ),
        (
            "val_loss.csv",
            format!("Step,run-7 - val/loss\n{}\n", val.join("\n")),
        ),
    ]);
    assert_eq!(rs.len(), 1, "{:?}", sources(&rs));
    assert!(rs[0].source.contains("train_loss.csv") && rs[0].source.contains("val_loss.csv"));
    assert!(
        labels(&rs[0]).contains(&Label::Overfitting),
        "{:?}",
        labels(&rs[0])
    );
}

#[test]
fn llama_factorys_two_logs_of_one_run_are_read_once_as_a_language_model() {
    let train: Vec<(u64, f64)> = (1..=50)
        .map(|i| (i * 10, 1.2 + 0.8 * (-(i as f64) / 10.0).exp()))
        .collect();
    let log: Vec<String> = train
        .iter()
        .map(|(s, l)| format!(r#"{{"current_steps": {s}, "total_steps": 500, "loss": {l}, "lr": 2e-5}}"#))
        .collect();
    let rs = reports_of(&[
        ("trainer_state.json", trainer_state(&train, &[], 500)),
        ("trainer_log.jsonl", log.join("\n")),
    ]);
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0].task, Task::LanguageModel);
}

#[test]
fn every_evaluation_set_of_a_trainer_is_judged_and_named() {
    // Set `a` rises after step 600 while training falls; set `b` keeps falling.
    let train: Vec<(u64, f64)> = (1..=30)
        .map(|i| (i * 100, 0.7 * (-(i as f64) / 8.0).exp()))
        .collect();
    let mut rows: Vec<String> = train
        .iter()
        .map(|(s, l)| format!(r#"{{"step": {s}, "loss": {l}, "learning_rate": 2e-5}}"#))
        .collect();
    for i in 1..=15u64 {
        let a = if i <= 3 {
            0.5 - 0.05 * i as f64
        } else {
            0.35 + 0.03 * (i - 3) as f64
        };
        let b = 0.3 + 0.4 * (-(i as f64) / 4.0).exp();
        rows.push(format!(
            r#"{{"step": {}, "eval_a_loss": {a}, "eval_b_loss": {b}}}"#,
            i * 200
        ));
    }
    let state = format!(r#"{{"max_steps": 3000, "log_history": [{}]}}"#, rows.join(", "));
    let rs = reports_of(&[("trainer_state.json", state)]);
    let names: Vec<&str> = rs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(rs.len(), 2, "{names:?}");
    let by = |set: &str| {
        rs.iter()
            .find(|r| r.name.ends_with(&format!("[eval set {set}]")))
            .unwrap()
    };
    assert!(
        labels(by("a")).contains(&Label::Overfitting),
        "{:?}",
        labels(by("a"))
    );
    assert!(
        !labels(by("b")).contains(&Label::Overfitting),
        "{:?}",
        labels(by("b"))
    );
}

#[test]
fn a_csv_logger_file_separated_by_semicolons_is_read() {
    // Keras's CSVLogger(separator=";"): validation turns up at epoch 12 while the loss falls.
    let rows: Vec<String> = (0..40)
        .map(|e| {
            let e = e as f64;
            let val = 0.3 + 0.002 * (e - 12.0).powi(2) / (1.0 + 0.05 * (e - 12.0).abs());
            format!("{e};0.9;{};0.8;{val}", 0.6 * (-e / 10.0).exp())
        })
        .collect();
    let rs = reports_of(&[(
        "training_logs.csv",
        format!("epoch;acc;loss;val_acc;val_loss\n{}\n", rows.join("\n")),
    )]);
    assert_eq!(rs.len(), 1, "{:?}", sources(&rs));
    assert!(
        labels(&rs[0]).contains(&Label::Overfitting),
        "{:?}",
        labels(&rs[0])
    );
}

#[test]
fn a_csv_logger_file_of_any_name_is_read_and_a_text_log_beside_it_is_passed_over() {
    let rows: Vec<String> = (0..40)
        .map(|e| format!("{e},0.6428571428571429,{}", 5.7939 - 1e-6 * e as f64))
        .collect();
    let rs = reports_of(&[
        (
            "predict_age.log",
            format!("epoch,acc,loss\n{}\n", rows.join("\n")),
        ),
        (
            "run.log",
            "INFO starting, batch 32\nloss went down, nice\n".into(),
        ),
    ]);
    assert_eq!(rs.len(), 1, "{:?}", sources(&rs));
    assert!(rs[0].source.ends_with("predict_age.log"));
}

#[test]
fn a_loss_that_jumps_at_its_second_step_and_never_comes_back_has_diverged_not_plateaued() {
    // LR 5 instead of 5e-5: 1.64, then ln 32000 for the rest of the run.
    let mut train = vec![(1, 1.637), (2, 11.807), (3, 11.605), (4, 10.383)];
    train.extend((5..=10).map(|s| (s, 32000f64.ln())));
    let r = &reports_of(&[("trainer_state.json", trainer_state(&train, &[], 10))])[0];
    let f = finding(r, Label::LossSpike);
    assert_eq!(f.step, 2);
    assert!(
        f.recommendation.contains("never came back"),
        "{}",
        f.recommendation
    );
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", labels(r));
    // The same jump that comes back is no divergence.
    let mut back = train.clone();
    for p in back.iter_mut().skip(4) {
        p.1 = 1.5;
    }
    let r = &reports_of(&[("trainer_state.json", trainer_state(&back, &[], 10))])[0];
    assert!(
        r.findings
            .iter()
            .all(|f| !f.recommendation.contains("never came back")),
        "{:?}",
        labels(r)
    );
}

/// A falling validation loss with a small set's noise: an evaluation's values (step, loss).
fn noisy_falling_eval(n: u64, swing: f64) -> Vec<(u64, f64, Option<f64>)> {
    (1..=n)
        .map(|i| {
            let level = 1.2 * (-(i as f64) / n as f64).exp();
            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
            (i * 100, level * (1.0 + sign * swing), None)
        })
        .collect()
}

#[test]
fn a_validation_loss_that_jumps_up_and_back_at_many_evaluations_oscillates() {
    // The training loss falls smoothly; validation doubles and comes back at every other eval.
    let train: Vec<(u64, f64)> = (1..=120)
        .map(|i| (i * 10, 1.5 / (1.0 + 0.02 * i as f64)))
        .collect();
    let swinging = noisy_falling_eval(12, 0.4);
    let r = &reports_of(&[("trainer_state.json", trainer_state(&train, &swinging, 1200))])[0];
    let f = finding(r, Label::Oscillation);
    assert!(
        f.recommendation.starts_with("val_loss swings"),
        "{}",
        f.recommendation
    );
    assert!(f.evidence["evaluations_swinging"] >= 3.0, "{:?}", f.evidence);
    // The same run with a validation loss that wobbles 5 %: no oscillation.
    let calm = noisy_falling_eval(12, 0.05);
    let r = &reports_of(&[("trainer_state.json", trainer_state(&train, &calm, 1200))])[0];
    assert!(!labels(r).contains(&Label::Oscillation), "{:?}", labels(r));
}

#[test]
fn a_trainer_state_saved_under_another_name_is_read_by_its_content() {
    let train: Vec<(u64, f64)> = (1..=30).map(|i| (i * 10, 1.0 / i as f64)).collect();
    let rs = reports_of(&[
        ("__init__.py", trainer_state(&train, &[], 300)),
        ("run_lrqa.py", "import transformers\n".to_string()),
    ]);
    assert_eq!(rs.len(), 1, "{:?}", sources(&rs));
    assert!(rs[0].source.ends_with("__init__.py"), "{}", rs[0].source);
}

/// An MLflow run folder under `root` with `metrics` (key, lines `timestamp value step`) and
/// `params` (key, value).
fn mlflow_run(root: &Path, metrics: &[(&str, String)], params: &[(&str, &str)]) {
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

#[test]
fn mlflow_values_logged_without_a_step_are_ordered_by_time_and_tr_ls_is_the_training_loss() {
    // Thirteen epochs logged at step 0, written out of order; the last blows up.
    let mut values = vec![
        0.86, 0.73, 0.71, 0.70, 0.69, 0.68, 0.68, 0.67, 0.66, 0.66, 0.65, 0.65,
    ];
    values.push(9.6e7);
    let line = |(i, v): (usize, &f64)| format!("{} {v} 0\n", 1_592_800_000_000u64 + 1000 * i as u64);
    let mut lines: Vec<String> = values.iter().enumerate().map(line).collect();
    lines.swap(3, 4);
    let val: String = (0..13)
        .map(|i| format!("{} {} 0\n", 1_592_800_000_500u64 + 1000 * i, 0.9))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    mlflow_run(
        dir.path(),
        &[("tr_ls", lines.concat()), ("val_ls", val)],
        &[("tr_epochs", "50")],
    );
    let r = &reports(dir.path())[0];
    let f = finding(r, Label::LossSpike);
    assert_eq!(f.step, 12);
    assert!(
        (f.evidence["value"] / 9.6e7 - 1.0).abs() < 1e-9,
        "{:?}",
        f.evidence
    );
}

#[test]
fn mlflow_epochs_named_by_any_epochs_parameter_make_the_patience_epochs() {
    // 200 epochs logged at steps 0..199, planned in a parameter named `Epochs`: validation
    // turns at 40 and sits 7 % above its best while the training loss falls by a third. Read
    // as steps, 300 steps of patience would be 300 evaluations: more than the run has.
    let train = mlflow_lines(200, &|i| {
        if i < 40.0 {
            1.6
        } else {
            1.1 + 0.5 * (-(i - 40.0) / 20.0).exp()
        }
    });
    let val = mlflow_lines(200, &|i| {
        if i < 40.0 {
            1.6 - 0.0005 * i
        } else {
            1.70 - 0.12 * (-(i - 40.0) / 15.0).exp()
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let metrics = [("train_loss", train), ("validation_loss", val)];
    mlflow_run(dir.path(), &metrics, &[("Epochs", "200")]);
    let r = &reports(dir.path())[0];
    assert!(labels(r).contains(&Label::Overfitting), "{:?}", labels(r));
    // Without the parameter the steps stay steps, and the patience with them.
    let dir = tempfile::tempdir().unwrap();
    mlflow_run(dir.path(), &metrics, &[]);
    let r = &reports(dir.path())[0];
    assert!(!labels(r).contains(&Label::Overfitting), "{:?}", labels(r));
}

#[test]
fn a_warmup_over_a_tenth_of_a_short_run_is_no_finding_and_one_over_a_third_is() {
    let state = |warmup: u64| {
        let rows: Vec<String> = (1..=75u64)
            .map(|s| {
                let lr = if s <= warmup {
                    5e-5 * s as f64 / warmup as f64
                } else {
                    5e-5 * (75 - s) as f64 / (75 - warmup) as f64
                };
                format!(
                    r#"{{"step": {s}, "loss": {}, "learning_rate": {lr}}}"#,
                    0.7 - 0.004 * s as f64
                )
            })
            .collect();
        format!(r#"{{"max_steps": 75, "log_history": [{}]}}"#, rows.join(", "))
    };
    let r = &reports_of(&[("trainer_state.json", state(10))])[0];
    assert!(!labels(r).contains(&Label::LrWarmupTooLong), "{:?}", labels(r));
    let r = &reports_of(&[("trainer_state.json", state(25))])[0];
    assert!(labels(r).contains(&Label::LrWarmupTooLong), "{:?}", labels(r));
}

/// MLflow metric lines `timestamp value step` for steps `0..n` of `f`.
fn mlflow_lines(n: u64, f: &dyn Fn(f64) -> f64) -> String {
    (0..n)
        .map(|i| format!("{} {} {i}\n", 1_600_000_000_000u64 + 1000 * i, f(i as f64)))
        .collect()
}

#[test]
fn a_stall_that_one_late_lr_cut_breaks_is_a_plateau_and_a_new_epochs_drop_is_not() {
    // 180 epochs: down to 0.65 by 30, 3 % better by 90, then -20 % at once and on down to 0.25.
    let loss = |i: f64| {
        if i < 30.0 {
            1.65 - i / 30.0
        } else if i < 91.0 {
            0.65 - 0.02 * (i - 30.0) / 60.0 + 0.005 * (i % 2.0)
        } else {
            0.25 + 0.24 * (-(i - 91.0) / 20.0).exp()
        }
    };
    let dir = tempfile::tempdir().unwrap();
    mlflow_run(dir.path(), &[("train_loss", mlflow_lines(180, &loss))], &[]);
    let r = &reports(dir.path())[0];
    let f = finding(r, Label::Plateau);
    assert!(
        f.recommendation.contains("stalled from step"),
        "{}",
        f.recommendation
    );
    assert!(
        (85.0..=91.0).contains(&f.evidence["window_end_step"]),
        "{:?}",
        f.evidence
    );
    // The same drop with a logged LR that did not move: the data's (a new epoch), no late cut.
    let dir = tempfile::tempdir().unwrap();
    let lr = mlflow_lines(180, &|_| 1e-3);
    mlflow_run(
        dir.path(),
        &[("train_loss", mlflow_lines(180, &loss)), ("lr", lr)],
        &[],
    );
    let r = &reports(dir.path())[0];
    assert!(
        r.findings
            .iter()
            .all(|f| !f.recommendation.contains("stalled from step")),
        "{:?}",
        labels(r)
    );
}

#[test]
fn a_flat_tail_with_validation_flat_at_its_best_is_convergence_not_a_plateau() {
    // 300 epochs: 2.0 down to 0.25 by 150, then flat; validation flat at its best from 150 on.
    let train = |i: f64| 0.25 + 1.75 * (-i / 25.0).exp() + 0.002 * (i % 3.0);
    let val = |i: f64| 0.27 + 0.3 * (-i / 25.0).exp() + 0.001 * (i % 2.0);
    let dir = tempfile::tempdir().unwrap();
    let metrics = [
        ("train_loss", mlflow_lines(300, &train)),
        ("val_loss", mlflow_lines(300, &val)),
    ];
    mlflow_run(dir.path(), &metrics, &[("epochs", "300")]);
    let r = &reports(dir.path())[0];
    assert_eq!(labels(r), vec![Label::Healthy]);
    // Without a validation loss nothing says the tail converged: a plateau.
    let dir = tempfile::tempdir().unwrap();
    mlflow_run(dir.path(), &metrics[..1], &[("epochs", "300")]);
    let r = &reports(dir.path())[0];
    assert!(labels(r).contains(&Label::Plateau), "{:?}", labels(r));
}

/// A Trainer state of three epochs of 100 steps under a cosine LR: `loss(step)`.
fn three_epochs(loss: &dyn Fn(f64) -> f64) -> String {
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
    format!(r#"{{"max_steps": 300, "log_history": [{}]}}"#, rows.join(", "))
}

#[test]
fn a_second_epoch_no_better_than_the_first_is_a_plateau_whatever_the_lr_decay_does() {
    // 2.5 down to 1.93 in 15 steps, then flat (+-2 %) for three epochs.
    let flat = |s: f64| 1.93 + 0.57 * (-s / 5.0).exp() + 0.04 * ((s * 7.0) % 3.0 - 1.0);
    let r = &reports_of(&[("trainer_state.json", three_epochs(&flat))])[0];
    let f = finding(r, Label::Plateau);
    assert_eq!(f.evidence["steps_per_epoch"], 100.0);
    assert!(f.recommendation.contains("second epoch"), "{}", f.recommendation);
    // A fine-tune that steps down 10 % at each new epoch learns.
    let steps = |s: f64| flat(s) * 0.9f64.powi((s / 100.0).floor() as i32);
    let r = &reports_of(&[("trainer_state.json", three_epochs(&steps))])[0];
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", labels(r));
}

#[test]
fn a_jump_in_a_sparse_log_is_a_spike_even_after_earlier_ones_and_no_plateau() {
    // 25 logs every 50 steps: a noisy descent to 1e-4 with 10x blips, then 0.083 near the end.
    let values = [
        0.345, 0.26, 0.167, 0.0899, 0.0492, 0.0348, 0.0154, 0.155, 0.00394, 0.0511, 0.000499, 0.00708,
        0.000381, 0.00184, 0.000238, 0.000106, 0.000215, 0.000314, 0.000104, 0.000157, 0.000241, 0.000109,
        0.00321, 0.0833, 0.0128,
    ];
    let train: Vec<(u64, f64)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (49 + 50 * i as u64, *v))
        .collect();
    let r = &reports_of(&[("trainer_state.json", trainer_state(&train, &[], 1250))])[0];
    let f = finding(r, Label::LossSpike);
    assert_eq!(f.step, 1199);
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", labels(r));
}

/// A deterministic draw in [0, 1) for step `i` (a per-batch metric's noise).
fn jitter(i: u64) -> f64 {
    let x = i
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[test]
fn a_probe_whose_per_batch_loss_comes_down_to_ln_k_with_accuracy_at_one_in_k_is_stuck() {
    // A linear probe over 14 classes logged per batch every 50 steps: its untrained head starts
    // worse than uniform (3.3) and comes down to ln 14, its batch accuracy around 1/14.
    let csv = |acc_end: f64, loss_end: f64| {
        let mut rows = vec!["train_loss,train_acc,epoch,step".to_string()];
        for i in 0..28u64 {
            let t = i as f64 / 27.0;
            let loss = 3.3 + (loss_end - 3.3) * t.min(0.6) / 0.6 + 0.3 * (jitter(i) - 0.5);
            let acc = (1.0 / 14.0 + (acc_end - 1.0 / 14.0) * t + 0.1 * (jitter(i + 99) - 0.5)).max(0.0);
            rows.push(format!("{loss},{acc},{},{}", i * 50 / 70, 49 + 50 * i));
        }
        rows.join("\n") + "\n"
    };
    let r = &reports_of(&[("metrics.csv", csv(1.0 / 14.0, 14f64.ln()))])[0];
    let f = finding(r, Label::StuckAtChance);
    // K from the loss's level alone: per-batch noise moves it by a class or so.
    assert!((12.0..=16.0).contains(&f.evidence["classes"]), "{f:?}");
    // The same fall from above with accuracy climbing to 30 %: it learns.
    let r = &reports_of(&[("metrics.csv", csv(0.3, 14f64.ln()))])[0];
    assert!(!labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
}

#[test]
fn a_model_that_memorises_while_validation_guesses_is_stuck_at_chance_and_overfitting() {
    // Five classes, 200 epochs: training falls from ln 5 after epoch 38; validation's balanced
    // accuracy stays at 1/5 while its loss drifts 6 % above ln 5 (confident wrong guesses).
    let csv = |bas_end: f64| {
        let mut rows = vec!["epoch,step,train_loss,val_loss,val_bas".to_string()];
        for e in 0..200u64 {
            let t = e as f64;
            let train = if e < 38 {
                1.609 - 0.0005 * t
            } else {
                1.1 + 0.49 * (-(t - 38.0) / 30.0).exp()
            };
            let val = if e < 42 {
                1.609 - 0.0004 * t
            } else {
                1.592 + 0.12 * (1.0 - (-(t - 42.0) / 40.0).exp())
            };
            let bas = if e < 36 {
                0.2
            } else {
                0.19 + (bas_end - 0.19) * (t - 36.0) / 163.0 + 0.02 * (jitter(e) - 0.5)
            };
            rows.push(format!("{e},{},{train},{val},{bas}", 10 * e + 9));
        }
        rows.join("\n") + "\n"
    };
    let r = &reports_of(&[("metrics.csv", csv(0.19))])[0];
    assert!(labels(r).contains(&Label::Overfitting), "{:?}", labels(r));
    let f = finding(r, Label::StuckAtChance);
    assert_eq!(f.evidence["classes"], 5.0, "{f:?}");
    // Validation accuracy climbing to 45 %: what it learns generalises, if less and less.
    let r = &reports_of(&[("metrics.csv", csv(0.45))])[0];
    assert!(!labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
}

#[test]
fn a_loss_that_doubles_at_once_and_stays_up_diverged_and_heavy_tailed_batch_noise_did_not() {
    // A binary classifier logged every 10 steps learns from ln 2 to ~0.35, then one update
    // throws it back to ~0.68 for the rest of its 500 steps: no point of that is a spike.
    let collapse: Vec<(u64, f64)> = (1..=50u64)
        .map(|i| {
            let noise = 0.06 * (jitter(i) - 0.5);
            let level = if i <= 30 {
                0.35 + 0.33 * (-(i as f64) / 8.0).exp()
            } else {
                0.68
            };
            (i * 10, level + noise)
        })
        .collect();
    let r = &reports_of(&[("trainer_state.json", trainer_state(&collapse, &[], 500))])[0];
    let f = finding(r, Label::LossSpike);
    assert_eq!(f.step, 310);
    assert!(f.recommendation.contains("stayed there"), "{}", f.recommendation);
    // A DPO loss on tiny batches: most points near 0, every few a batch near ln 2 or above,
    // the same from start to end — its jumps come back at once.
    let noisy: Vec<(u64, f64)> = (1..=200u64)
        .map(|i| {
            let u = jitter(i);
            let v = if u < 0.7 {
                0.001 + 0.02 * jitter(i + 7)
            } else {
                0.1 + 0.9 * jitter(i + 7)
            };
            (i, if i <= 5 { 0.693 } else { v })
        })
        .collect();
    let r = &reports_of(&[("trainer_state.json", trainer_state(&noisy, &[], 200))])[0];
    assert!(!labels(r).contains(&Label::LossSpike), "{:?}", labels(r));
}

#[test]
fn a_loss_that_never_fell_under_a_decaying_lr_is_a_plateau_and_one_that_fell_then_flattened_is_not() {
    // An LLM LoRA run logged every 10 steps for 1000, cosine from the peak at its first log;
    // `fall` of its loss in its first 200 steps, then level, with per-log noise of ±5 %.
    let state = |fall: f64| {
        let rows: Vec<String> = (1..=100u64)
            .map(|i| {
                let s = i * 10;
                let lr = 1e-4 * (1.0 + (std::f64::consts::PI * s as f64 / 1000.0).cos());
                let level = 2.15 * (1.0 - fall * (s as f64 / 200.0).min(1.0));
                let loss = level * (1.0 + 0.1 * (jitter(i) - 0.5));
                format!(r#"{{"step": {s}, "loss": {loss}, "learning_rate": {lr}}}"#)
            })
            .collect();
        format!(r#"{{"max_steps": 1000, "log_history": [{}]}}"#, rows.join(", "))
    };
    let r = &reports_of(&[("trainer_state.json", state(0.0))])[0];
    let f = finding(r, Label::Plateau);
    assert_eq!(f.evidence["never_improved"], 1.0, "{f:?}");
    assert!(
        f.recommendation.contains("never improved"),
        "{}",
        f.recommendation
    );
    // A loss that fell by a quarter and then flattened as its LR decayed converged.
    let r = &reports_of(&[("trainer_state.json", state(0.25))])[0];
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", labels(r));
}

#[test]
fn a_validation_loss_that_blows_up_between_two_evaluations_is_a_spike_the_training_loss_hides() {
    // A classifier over 15 epochs of 100 steps: training falls smoothly; validation is noisy
    // (0.4-1.3) and, with `blow_up`, jumps to 9.4 at epoch 9 and is back at the next.
    let state = |blow_up: bool| {
        let train: Vec<(u64, f64)> = (1..=150u64)
            .map(|i| (i * 10, 0.02 + 0.25 * (-(i as f64) / 30.0).exp()))
            .collect();
        let eval: Vec<(u64, f64, Option<f64>)> = (1..=15u64)
            .map(|e| {
                let v = if blow_up && e == 9 {
                    9.4
                } else {
                    0.4 + 0.9 * jitter(e)
                };
                (e * 100, v, None)
            })
            .collect();
        trainer_state(&train, &eval, 1500)
    };
    let r = &reports_of(&[("trainer_state.json", state(true))])[0];
    let f = finding(r, Label::LossSpike);
    assert_eq!((f.step, f.evidence["on_validation"]), (900, 1.0), "{f:?}");
    let r = &reports_of(&[("trainer_state.json", state(false))])[0];
    assert!(!labels(r).contains(&Label::LossSpike), "{:?}", labels(r));
}

#[test]
fn a_run_that_ends_inside_the_warmup_its_hparams_state_is_told_so() {
    // A one-epoch smoke test of a recipe that warms up over 5 epochs: Lightning logged the LR
    // once (a fifth of the peak, the scheduler steps per epoch), the loss every 10 steps.
    let csv = |warmup: u32| {
        let mut rows = vec![
            "epoch,lr-AdamW,step,train_loss".to_string(),
            ",0.0002,0,".to_string(),
        ];
        rows.extend((1..=60u64).map(|i| format!("0,,{},{}", 10 * i - 1, 2.3 - 0.8 * i as f64 / 60.0)));
        let hparams = format!("learning_rate: 0.001\nmax_epochs: 1\nwarmup_epochs: {warmup}\n");
        [("metrics.csv", rows.join("\n") + "\n"), ("hparams.yaml", hparams)]
    };
    let r = &reports_of(&csv(5))[0];
    let f = finding(r, Label::LrWarmupTooLong);
    assert!(
        f.recommendation.contains("ends inside its LR warmup"),
        "{}",
        f.recommendation
    );
    assert!(
        f.recommendation.contains("`warmup_epochs: 5` in hparams.yaml"),
        "{}",
        f.recommendation
    );
    // No warmup stated: nothing to say about it.
    let r = &reports_of(&csv(0))[0];
    assert!(!labels(r).contains(&Label::LrWarmupTooLong), "{:?}", labels(r));
}

#[test]
fn three_evaluations_at_ln_k_with_accuracy_at_one_in_k_are_stuck_at_chance() {
    // A 3-epoch trial: validation at ln 10 and 11 % accuracy at each epoch end.
    let eval = [
        (175, 2.30133, Some(0.1074)),
        (351, 2.30132, Some(0.1074)),
        (527, 2.30129, Some(0.1074)),
    ];
    let r = &reports_of(&[("trainer_state.json", trainer_state(&[], &eval, 527))])[0];
    assert!(labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
    // Without the accuracy to confirm it, three evaluations are too few to tell.
    let bare: Vec<_> = eval.iter().map(|(s, l, _)| (*s, *l, None)).collect();
    let r = &reports_of(&[("trainer_state.json", trainer_state(&[], &bare, 527))])[0];
    assert!(!labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
}

#[test]
fn a_healthy_verdict_is_as_sure_as_what_it_could_judge() {
    // 600 steps under a linear decay, the loss falling; `evals` evaluations every 100 steps.
    let state = |evals: u64| {
        let mut rows: Vec<String> = (1..=60u64)
            .map(|i| {
                let (lr, loss) = (5e-5 * (1.0 - i as f64 / 61.0), 2.0 / (1.0 + 0.05 * i as f64));
                format!(r#"{{"step": {}, "loss": {loss}, "learning_rate": {lr}}}"#, i * 10)
            })
            .collect();
        rows.extend((1..=evals).map(|i| {
            let loss = 2.1 / (1.0 + 0.5 * i as f64);
            format!(r#"{{"step": {}, "eval_loss": {loss}}}"#, i * 100)
        }));
        format!(r#"{{"max_steps": 600, "log_history": [{}]}}"#, rows.join(", "))
    };
    let confidence = |evals: u64| {
        let r = reports_of(&[("trainer_state.json", state(evals))]).remove(0);
        let f = r.findings.into_iter().find(|f| f.label == Label::Healthy);
        f.map(|f| f.confidence)
    };
    assert_eq!(
        confidence(6),
        Some(Confidence::High),
        "six evaluations, 60 losses"
    );
    assert_eq!(confidence(2), Some(Confidence::Medium), "two evaluations");
    assert_eq!(
        confidence(0),
        Some(Confidence::Low),
        "no validation: overfitting unjudged"
    );
}

#[test]
fn a_spike_far_past_its_threshold_is_sure_and_one_nearer_it_is_not() {
    // A smooth falling loss with one jump at step 300: 20x, then 2.5x.
    let spike = |jump: f64| {
        let train: Vec<(u64, f64)> = (1..=40)
            .map(|i| {
                let v = 1.0 / (1.0 + 0.02 * i as f64) * (1.0 + 0.003 * (i % 2) as f64);
                (i * 10, if i == 30 { v * jump } else { v })
            })
            .collect();
        let r = reports_of(&[("trainer_state.json", trainer_state(&train, &[], 400))]).remove(0);
        r.findings.into_iter().find(|f| f.label == Label::LossSpike)
    };
    assert_eq!(spike(20.0).map(|f| f.confidence), Some(Confidence::High));
    let nearer = spike(2.5).expect("a 2.5x jump on a smooth curve is a spike");
    assert_eq!(nearer.confidence, Confidence::Medium, "{:?}", nearer.evidence);
}

/// LLaMA-Factory's `trainer_log.jsonl` of a loss only (no LR logged): `n` lines of `loss(step)`.
fn loss_only_log(n: u64, loss: &dyn Fn(f64) -> f64) -> String {
    (1..=n)
        .map(|s| {
            let l = loss(s as f64);
            format!("{{\"current_steps\": {s}, \"total_steps\": {n}, \"loss\": {l}}}\n")
        })
        .collect()
}

#[test]
fn with_no_lr_logged_the_schedule_and_warmup_the_run_states_are_judged_and_quoted() {
    let args = "stage: sft\nlr_scheduler_type: constant\nwarmup_ratio: 0.3\n\
                learning_rate: 1.0e-4\nper_device_train_batch_size: 8\n\
                gradient_accumulation_steps: 4\n";
    let falling = |s: f64| 0.5 + 1.5 / (1.0 + 0.02 * s);
    let r = &reports_of(&[
        ("trainer_log.jsonl", loss_only_log(400, &falling)),
        ("training_args.yaml", args.to_string()),
    ])[0];
    assert_eq!(
        r.setup_line().as_deref(),
        Some("constant, warmup 30 %, peak LR 1.00e-4, batch 8 x 4 accumulated = 32 (training_args.yaml)")
    );
    let f = finding(r, Label::LrNoDecay);
    assert!(
        f.recommendation
            .contains("`lr_scheduler_type: constant` in training_args.yaml"),
        "{}",
        f.recommendation
    );
    match &f.detail {
        Some(Detail::Setting(s)) => assert_eq!(
            (s.key.as_str(), s.value.as_str()),
            ("lr_scheduler_type", "constant")
        ),
        other => panic!("{other:?}"),
    }
    let f = finding(r, Label::LrWarmupTooLong);
    assert_eq!(f.evidence["warmup_fraction"], 0.3);
    // A decaying schedule: no finding about the LR.
    let cosine = args.replace("constant", "cosine").replace("0.3", "0.03");
    let r = &reports_of(&[
        ("trainer_log.jsonl", loss_only_log(400, &falling)),
        ("training_args.yaml", cosine),
    ])[0];
    assert!(!labels(r).contains(&Label::LrNoDecay), "{:?}", labels(r));
    assert!(!labels(r).contains(&Label::LrWarmupTooLong), "{:?}", labels(r));
}

#[test]
fn a_flat_tail_under_a_decaying_schedule_the_params_name_is_convergence() {
    // 300 epochs falling to a flat tail, no LR logged, no validation.
    let train = |i: f64| 0.25 + 1.75 * (-i / 25.0).exp() + 0.002 * (i % 3.0);
    let plateau_with = |schedule: &str| {
        let dir = tempfile::tempdir().unwrap();
        let params = [("epochs", "300"), ("lr_scheduler_type", schedule)];
        mlflow_run(dir.path(), &[("train_loss", mlflow_lines(300, &train))], &params);
        labels(&reports(dir.path())[0]).contains(&Label::Plateau)
    };
    assert!(
        !plateau_with("SchedulerType.COSINE"),
        "the LR anneals over the tail"
    );
    assert!(plateau_with("constant"), "the LR stays: a plateau to act on");
}

#[test]
fn no_warmup_and_a_loss_that_rises_in_the_first_steps_is_a_warmup_too_short() {
    // 2000 steps under linear decay from the peak at step 0, a log every 25 steps.
    let state = |loss: &dyn Fn(f64) -> f64| {
        let rows: Vec<String> = (1..=80u64)
            .map(|i| {
                let s = i * 25;
                let lr = 1e-4 * (1.0 - s as f64 / 2000.0);
                format!(
                    r#"{{"step": {s}, "loss": {}, "learning_rate": {lr}}}"#,
                    loss(s as f64)
                )
            })
            .collect();
        format!(r#"{{"max_steps": 2000, "log_history": [{}]}}"#, rows.join(", "))
    };
    // The loss triples over the first 150 steps before it comes down.
    let unstable = |s: f64| {
        if s <= 150.0 {
            0.27 + 0.0047 * (s - 25.0)
        } else {
            0.2 + 0.66 * (-(s - 150.0) / 600.0).exp()
        }
    };
    let r = &reports_of(&[("trainer_state.json", state(&unstable))])[0];
    let f = finding(r, Label::LrWarmupTooShort);
    assert_eq!(f.severity, contrai_doctor::Severity::Warning);
    assert_eq!(f.evidence["early_high_step"], 150.0);
    assert!(
        f.recommendation.contains("with no warmup"),
        "{}",
        f.recommendation
    );
    // No warmup and a loss that falls from the start: nothing to say about the warmup.
    let falling = |s: f64| 0.2 + 0.5 * (-s / 400.0).exp();
    let r = &reports_of(&[("trainer_state.json", state(&falling))])[0];
    assert!(!labels(r).contains(&Label::LrWarmupTooShort), "{:?}", labels(r));
}

#[test]
fn an_lr_schedule_that_begins_again_while_the_steps_go_on_is_a_resume_and_warm_restarts_are_not() {
    // Linear decay from 1e-4 over 2000 steps, a log every 25; `restart(step)` gives the step the
    // schedule counts from.
    let state = |restart: &dyn Fn(u64) -> u64| {
        let rows: Vec<String> = (1..=80u64)
            .map(|i| {
                let s = i * 25;
                let lr = 1e-4 * (1.0 - (restart(s) - 25) as f64 / 2000.0);
                let loss = 0.3 + 0.4 * (-(s as f64) / 500.0).exp();
                format!(r#"{{"step": {s}, "loss": {loss}, "learning_rate": {lr}}}"#)
            })
            .collect();
        format!(r#"{{"max_steps": 2000, "log_history": [{}]}}"#, rows.join(", "))
    };
    let once = |s: u64| if s >= 825 { s - 800 } else { s };
    let r = &reports_of(&[("trainer_state.json", state(&once))])[0];
    let f = finding(r, Label::ResumeDiscontinuity);
    assert_eq!(f.step, 825);
    match &f.detail {
        Some(Detail::Resume(res)) => {
            assert_eq!(res.boundaries[0].marker, Some(contrai_doctor::Marker::LrRestart))
        }
        other => panic!("{other:?}"),
    }
    // A schedule that begins again every 500 steps is planned (warm restarts): no resume.
    let periodic = |s: u64| (s - 25) % 500 + 25;
    let r = &reports_of(&[("trainer_state.json", state(&periodic))])[0];
    assert!(
        !labels(r).contains(&Label::ResumeDiscontinuity),
        "{:?}",
        labels(r)
    );
}

#[test]
fn a_job_resumed_at_irregular_steps_with_a_schedule_from_zero_each_time_is_resumed() {
    // A warmup from 0 over 10 steps then a linear decay, logged every step; each segment's
    // schedule is its own (a resume that recomputes it), beginning at `starts`.
    let state = |starts: &[u64]| {
        let rows: Vec<String> = (1..=1000u64)
            .map(|s| {
                let from = starts.iter().rev().find(|&&b| b <= s).copied().unwrap_or(1);
                let (t, len) = ((s - from) as f64, (1001 - from) as f64);
                let lr = if t < 10.0 {
                    2e-4 * t / 10.0
                } else {
                    2e-4 * (1.0 - (t - 10.0) / (len - 10.0))
                };
                let loss = 0.3 + 0.4 * (-(s as f64) / 300.0).exp();
                format!(r#"{{"step": {s}, "loss": {loss}, "learning_rate": {lr}}}"#)
            })
            .collect();
        format!(r#"{{"max_steps": 1000, "log_history": [{}]}}"#, rows.join(", "))
    };
    let r = &reports_of(&[("trainer_state.json", state(&[1, 401, 531, 851]))])[0];
    let f = finding(r, Label::ResumeDiscontinuity);
    assert_eq!(f.step, 401);
    match &f.detail {
        Some(Detail::Resume(res)) => assert_eq!(res.boundaries.len(), 3, "{res:?}"),
        other => panic!("{other:?}"),
    }
    // Cycles of one length from zero (cosine-with-restarts' shape) are planned: no resume.
    let r = &reports_of(&[("trainer_state.json", state(&[1, 251, 501, 751]))])[0];
    assert!(
        !labels(r).contains(&Label::ResumeDiscontinuity),
        "{:?}",
        labels(r)
    );
}

#[test]
fn lightning_validation_batch_rows_on_their_own_counter_are_no_resume() {
    // Lightning writes `val_loss_step` against the validation loop's counter (one batch an
    // epoch: step = epoch), between rows on the training step (4 batches an epoch).
    let mut rows =
        vec!["epoch,step,train_loss_epoch,train_loss_step,val_loss_epoch,val_loss_step".to_string()];
    for e in 0..60u64 {
        let s = 4 * e + 3;
        let v = 0.2 + 0.5 / (1.0 + e as f64);
        rows.push(format!(",{e},,,,{v}"));
        rows.push(format!("{e},{s},,,{v},"));
        rows.push(format!("{e},{s},{},{},,", v - 0.05, v - 0.04));
    }
    let r = &reports_of(&[("metrics.csv", rows.join("\n") + "\n")])[0];
    assert!(
        !labels(r).contains(&Label::ResumeDiscontinuity),
        "{:?}",
        labels(r)
    );
    assert!(labels(r).contains(&Label::Healthy), "{:?}", labels(r));
}

#[test]
fn a_validation_loss_frozen_for_the_last_third_of_the_run_is_a_plateau() {
    // Validation falls to 1.0 at its 20th evaluation, then reads the same value to the last digit
    // for 10 more (the model collapsed to one output), while the LR stays up.
    let train: Vec<(u64, f64)> = (1..=300).map(|s| (s, 1.0 / (1.0 + s as f64 / 30.0))).collect();
    let eval: Vec<(u64, f64, Option<f64>)> = (1..=30)
        .map(|e| (10 * e, if e <= 20 { 2.0 - 0.05 * e as f64 } else { 1.0 }, None))
        .collect();
    let r = &reports_of(&[("trainer_state.json", trainer_state(&train, &eval, 300))])[0];
    let f = finding(r, Label::Plateau);
    assert!(
        f.recommendation.contains("at each of its last 11 evaluations"),
        "{}",
        f.recommendation
    );
}
