//! How real runs' files are read: W&B exports split a metric a file, LLaMA-Factory's two logs of
//! one run, every evaluation set of a Trainer, CSV loggers of any name and separator, MLflow
//! values without a step, Lightning's validation rows on their own counter.

use super::*;

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
fn llama_factorys_evaluation_after_training_is_no_point_of_the_run() {
    // A run of 1,000 steps evaluated every 200 (its validation still falling at the end), then
    // `do_eval` on the reloaded best model: a line of its own counter (50 batches) whose value
    // is the best's. Read as a point it was a relaunch at step 50 and a best before any other.
    let mut rows: Vec<String> = (1..=100u64)
        .map(|i| {
            let s = i * 10;
            format!(
                r#"{{"current_steps": {s}, "total_steps": 1000, "loss": {:.4}, "eval_loss": null, "learning_rate": {:e}, "epoch": {:.2}}}"#,
                0.6 + 0.9 * (-(s as f64) / 150.0).exp(),
                3e-5 * (1.0 - s as f64 / 1000.0),
                s as f64 / 500.0
            )
        })
        .collect();
    for (i, v) in [0.95, 0.9, 0.86, 0.83, 0.8].iter().enumerate() {
        let s = 200 * (i + 1);
        rows.insert(
            s / 10 + i,
            format!(r#"{{"current_steps": {s}, "total_steps": 1000, "loss": null, "eval_loss": {v}, "epoch": {:.2}}}"#, s as f64 / 500.0),
        );
    }
    rows.push(r#"{"current_steps": 50, "total_steps": 50, "loss": null, "eval_loss": 0.8, "learning_rate": null, "epoch": 2.0}"#.into());
    let rs = reports_of(&[("trainer_log.jsonl", rows.join("\n"))]);
    assert_eq!(labels(&rs[0]), vec![Label::Healthy]);
}

#[test]
fn an_error_metric_stands_in_for_a_loss_the_log_does_not_name_and_is_no_part_of_one() {
    // A linear regression on raw prices: only its training RMSE is logged, and it never moves.
    let rows: Vec<String> = (1..=100u64)
        .map(|e| format!("{e},{}", 197_932.75 - 0.004 * e as f64))
        .collect();
    let rs = reports_of(&[("training_log.csv", format!("Epoch,RMSE\n{}\n", rows.join("\n")))]);
    assert!(labels(&rs[0]).contains(&Label::Plateau), "{:?}", labels(&rs[0]));
    // Keras beside its loss: `mae` worsens on validation while the loss stays level. The loss
    // is what the run optimises; a metric beside it is no part of it.
    let rows: Vec<String> = (0..47u64)
        .map(|e| {
            let x = e as f64;
            let val_mae = if e < 30 {
                0.06 - 0.001 * x
            } else {
                0.03 + 0.002 * (x - 30.0)
            };
            format!(
                "{},{},{},{val_mae},1e-3",
                0.05 * (-x / 8.0).exp() + 0.003,
                0.13 * (-x / 8.0).exp() + 0.03,
                0.004 + 0.0001 * (x % 3.0)
            )
        })
        .collect();
    let rs = reports_of(&[(
        "training_history.csv",
        format!("loss,mae,val_loss,val_mae,learning_rate\n{}\n", rows.join("\n")),
    )]);
    assert!(
        !labels(&rs[0]).contains(&Label::Overfitting),
        "{:?}",
        labels(&rs[0])
    );
}

#[test]
fn tables_of_runs_results_beside_a_log_are_no_runs() {
    // A training history, a comparison of two models' averages (named rows, a learning-rate
    // column among them), and one row of a run's final metrics.
    let rows: Vec<String> = (1..=30u64)
        .map(|e| {
            let x = e as f64;
            format!(
                "{e},{},{}",
                0.7 * (-x / 10.0).exp() + 0.1,
                0.72 * (-x / 10.0).exp() + 0.12
            )
        })
        .collect();
    let rs = reports_of(&[
        (
            "training_results.csv",
            format!("epoch,train_loss,val_loss\n{}\n", rows.join("\n")),
        ),
        (
            "comparison_summary.csv",
            "model,learning_rate,avg_acc,avg_loss\nbaseline,1e-4,0.82,0.41\nhho,5e-4,0.77,0.48\n".into(),
        ),
        (
            "final_metrics.csv",
            "accuracy,precision,recall\n0.7998,0.0,0.0\n".into(),
        ),
    ]);
    assert_eq!(rs.len(), 1, "{:?}", sources(&rs));
    assert!(rs[0].source.ends_with("training_results.csv"));
    // A log of one row so far, with its epoch column, is a log.
    let rs = reports_of(&[("history.csv", "epoch,loss,val_loss\n0,0.9,0.95\n".into())]);
    assert_eq!(rs.len(), 1);
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
    let state = history(3000, &rows);
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
fn a_trainer_state_saved_under_another_name_is_read_by_its_content() {
    let train: Vec<(u64, f64)> = (1..=30).map(|i| (i * 10, 1.0 / i as f64)).collect();
    let rs = reports_of(&[
        ("__init__.py", trainer_state(&train, &[], 300)),
        ("run_lrqa.py", "import transformers\n".to_string()),
    ]);
    assert_eq!(rs.len(), 1, "{:?}", sources(&rs));
    assert!(rs[0].source.ends_with("__init__.py"), "{}", rs[0].source);
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
fn lightnings_per_epoch_twin_is_read_where_the_per_step_loss_is_sparser_and_its_epochs_set_the_patience() {
    // 50 epochs of 13 steps; `train_loss_step` every 50 steps (13 values), `train_loss_epoch` at
    // every epoch's end: an MSE on an unscaled target that moves 0.6 % in the whole run.
    let mut csv = String::from("epoch,step,train_loss_epoch,train_loss_step,val_loss\n");
    for e in 0..50u64 {
        let end = 13 * e + 12;
        for s in (13 * e..=end).filter(|s| s % 50 == 49) {
            csv += &format!("{e},{s},,{},\n", 1.9e8 + 2e7 * ((s * 31 % 7) as f64 / 3.0 - 1.0));
        }
        let fall = 1.0 - 0.0063 * (e as f64 / 49.0).powi(2);
        csv += &format!("{e},{end},,,{}\n", 2.012e8 * fall);
        csv += &format!("{e},{end},{},,\n", 2.078e8 * fall);
    }
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("metrics.csv"), csv).unwrap();
    let run = &read_path(dir.path(), None).unwrap()[0];
    assert_eq!(
        run.series[&contrai_doctor::Series::TrainLoss].tag,
        "train_loss_epoch"
    );
    assert_eq!(
        run.hints.steps_per_epoch.map(f64::round),
        Some(13.0),
        "from the epoch column"
    );
    finding(&reports(dir.path())[0], Label::Plateau);
}

#[test]
fn a_keras_history_saved_as_json_is_read_and_a_model_config_beside_it_is_not() {
    // `json.dump(history.history)`: per-epoch lists, the loss NaN from epoch 3 (bare tokens).
    let loss = "[0.91, 0.72, 0.66, NaN, NaN, NaN]";
    let rs = reports_of(&[
        (
            "training_history.json",
            format!(r#"{{"loss": {loss}, "accuracy": [0.5, 0.6, 0.62, 0.5, 0.5, 0.5], "val_loss": {loss}}}"#),
        ),
        (
            "config.json",
            r#"{"architectures": ["Net"], "num_labels": 2}"#.into(),
        ),
    ]);
    assert_eq!(rs.len(), 1, "{:?}", sources(&rs));
    assert!(rs[0].source.ends_with("training_history.json"));
    assert_eq!(finding(&rs[0], Label::Nonfinite).step, 3);
}

#[test]
fn a_pandas_history_without_an_epoch_column_writes_nan_as_an_empty_cell() {
    // `pd.DataFrame(history.history).to_csv(index=False)`: no step column, a row an epoch, the
    // NaN loss an empty field in every row.
    let rows: Vec<String> = (0..12).map(|_| "0.6487,,0.5905,".to_string()).collect();
    let rs = reports_of(&[(
        "training_history.csv",
        format!("accuracy,loss,val_accuracy,val_loss\n{}\n", rows.join("\n")),
    )]);
    assert_eq!(finding(&rs[0], Label::Nonfinite).step, 0);
    // Lightning's sparse rows beside a step column: an empty cell was not logged there.
    let rows: Vec<String> = (1..=40u64)
        .map(|s| {
            let loss = 1.0 / (1.0 + s as f64 / 10.0);
            if s % 10 == 0 {
                format!("{s},{loss},{}", loss * 1.1)
            } else {
                format!("{s},{loss},")
            }
        })
        .collect();
    let rs = reports_of(&[(
        "metrics.csv",
        format!("step,train_loss,val_loss\n{}\n", rows.join("\n")),
    )]);
    assert!(
        !labels(&rs[0]).contains(&Label::Nonfinite),
        "{:?}",
        labels(&rs[0])
    );
}

#[test]
fn keras_validation_is_read_on_the_epochs_its_training_loss_is_logged_on() {
    // Keras's TensorBoard callback: train/epoch_loss per epoch; validation/ holds epoch_loss per
    // epoch and evaluation_loss_vs_iterations at the optimizer's iterations (30 an epoch).
    // Validation is best at epoch 4 and then nearly doubles while the training loss falls to 0.02.
    use contrai_testkit::tfevents;
    let dir = tempfile::tempdir().unwrap();
    let (train, val) = (dir.path().join("train"), dir.path().join("validation"));
    fs::create_dir_all(&train).unwrap();
    fs::create_dir_all(&val).unwrap();
    let val_loss = |e: u64| 0.2751 + 0.0013 * (e as f32 - 4.0).powi(2);
    let train_events: Vec<u8> = (0..20u64)
        .flat_map(|e| tfevents::scalar(e, "epoch_loss", 0.55 * (-(e as f32) / 5.0).exp(), false))
        .collect();
    let val_events: Vec<u8> = (0..20u64)
        .flat_map(|e| {
            let mut v = tfevents::scalar(e, "epoch_loss", val_loss(e), false);
            v.extend(tfevents::scalar(
                30 * (e + 1),
                "evaluation_loss_vs_iterations",
                val_loss(e),
                false,
            ));
            v
        })
        .collect();
    fs::write(train.join("events.out.tfevents.1.host.0.v2"), train_events).unwrap();
    fs::write(val.join("events.out.tfevents.1.host.1.v2"), val_events).unwrap();
    let rs = reports(dir.path());
    assert_eq!(rs.len(), 1, "{:?}", sources(&rs));
    let f = finding(&rs[0], Label::Overfitting);
    assert_eq!(f.evidence["best_step"], 4.0, "{f:?}");
}

/// The runs read from `files` written to a fresh folder.
fn runs_of(files: &[(&str, String)]) -> Vec<contrai_doctor::Run> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        fs::write(dir.path().join(name), text).unwrap();
    }
    read_path(dir.path(), None).unwrap()
}

#[test]
fn a_loops_own_logs_rows_by_role_and_metrics_nested_by_role_are_read_by_role() {
    use contrai_doctor::Series;
    // A decision transformer's CSV: a row per epoch and role, the role in a `type` column.
    let rows: Vec<String> = (1..=30u64)
        .flat_map(|e| {
            let x = e as f64;
            [
                format!("{e},train,{},0.001", 0.03 + 0.01 * (-x / 5.0).exp()),
                format!("{e},validation,{},0.001", 0.031 + 0.01 * (-x / 5.0).exp()),
            ]
        })
        .collect();
    let run = runs_of(&[(
        "loss_log.csv",
        format!("epoch,type,loss,lr\n{}\n", rows.join("\n")),
    )])
    .remove(0);
    assert_eq!(run.points(Series::TrainLoss).len(), 30);
    assert_eq!(run.points(Series::ValLoss).len(), 30);
    // A ResNet loop's JSON lines: its metrics nested under `train` and `val`.
    let lines: Vec<String> = (0..12u64)
        .map(|e| {
            let x = e as f64;
            format!(
                r#"{{"epoch": {e}, "train": {{"loss": {}}}, "val": {{"loss": {}, "top1": {}}}, "aug": {{"mixup": 0.2}}}}"#,
                5.2 - 0.1 * x,
                4.9 - 0.1 * x,
                3.0 + x
            )
        })
        .collect();
    let run = runs_of(&[("log.jsonl", lines.join("\n") + "\n")]).remove(0);
    assert_eq!(run.points(Series::TrainLoss).len(), 12);
    assert_eq!(run.points(Series::ValLoss).len(), 12);
}
