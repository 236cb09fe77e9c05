//! Loss curves of real runs: a noisy rise after the minimum, divergence that stays, plateaus
//! (a stall an LR cut breaks, a loss that never fell, a frozen validation), convergence that is
//! not one, spikes in sparse logs and in validation, how sure a verdict is.

use super::*;

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
fn a_stalled_loss_is_a_plateau_and_its_batch_noise_no_oscillation() {
    // A U-Net's per-step loss (Lightning, every 10 steps) that never leaves its first level:
    // 0.23 with batch-to-batch noise of about 5 %, no validation, no LR logged.
    let mut n = contrai_testkit::Noise(11);
    let rows: Vec<String> = (0..183u64)
        .map(|i| {
            let noise = n.next() + n.next() + n.next();
            format!("{},{},{:.4}", i / 63, 10 * i + 9, 0.232 * (1.0 + 0.05 * noise))
        })
        .collect();
    let r = &reports_of(&[(
        "metrics.csv",
        format!("epoch,step,train_loss_step\n{}\n", rows.join("\n")),
    )])[0];
    assert!(labels(r).contains(&Label::Plateau), "{:?}", labels(r));
    assert!(!labels(r).contains(&Label::Oscillation), "{:?}", labels(r));
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
    // One that fell 1.31 -> 1.15 through its first epoch and then settled (a LoRA SFT's noisy
    // per-step loss, ±0.035) converged early: its second epoch is only ~1.5 % below the first, but
    // it learned.
    let early = |s: f64| 1.14 + 0.17 * (-s / 20.0).exp() + 0.035 * (2.0 * jitter(s as u64) - 1.0);
    let r = &reports_of(&[("trainer_state.json", three_epochs(&early))])[0];
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
        history(1000, &rows)
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
        history(600, &rows)
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

#[test]
fn validation_creeping_up_while_a_quiet_training_loss_creeps_down_is_overfitting() {
    // 100 epoch-end evaluations: validation at its lowest at epoch 5, then 13 % up by the end
    // with ±0.02 swings; the training loss falls 1 % after it, steadily, ±0.001.
    let rows = |train_fall: f64| {
        let mut csv = String::from("epoch,step,train_loss,val_loss\n");
        for e in 0..100u64 {
            let step = 1628 * (e + 1) - 1;
            let swing = 0.02 * ((e * 7919 % 13) as f64 / 6.0 - 1.0);
            let val = if e <= 5 {
                0.655 - 0.0072 * e as f64
            } else {
                0.6193 + 0.0009 * (e - 5) as f64 + swing
            };
            let base = if e <= 5 {
                0.644 - 0.0066 * e as f64
            } else {
                0.611 - train_fall * (e - 5) as f64 / 94.0
            };
            let wobble = 0.001 * ((e * 31 % 5) as f64 / 2.0 - 1.0);
            csv += &format!("{e},{step},{},{}\n", base + wobble, val);
        }
        csv
    };
    let r = &reports_of(&[("metrics.csv", rows(0.007))])[0];
    finding(r, Label::Overfitting);
    // The training loss level after the best (only its noise moves): validation worsening is
    // not the model fitting its training set.
    let r = &reports_of(&[("metrics.csv", rows(0.0))])[0];
    assert!(!labels(r).contains(&Label::Overfitting), "{:?}", labels(r));
}

#[test]
fn validation_rising_under_a_noisy_training_loss_that_falls_along_its_line_is_overfitting() {
    // 13 epochs (a Keras CSV): validation at its lowest at epoch 2, then up by more each epoch
    // (+75 % at the end); the training loss falls 0.011 an epoch under swings every other
    // epoch (small-sample epochs, up to +0.3), so its first and last few logs alone cannot tell
    // the fall.
    let rows = |train_fall: f64| {
        let mut csv = String::from("epoch,loss,val_loss\n");
        for e in 0..13u64 {
            let val = if e <= 2 {
                0.555 - 0.016 * e as f64
            } else {
                0.523 * (1.0 + 0.05 * ((e - 2) as f64).powf(1.3))
            };
            let swing = if e % 2 == 1 {
                0.2 * (2.0 * jitter(e) - 0.5)
            } else {
                0.01 * jitter(e)
            };
            csv += &format!("{e},{},{val}\n", 0.56 - train_fall * e as f64 + swing);
        }
        csv
    };
    let r = &reports_of(&[("training_history.csv", rows(0.011))])[0];
    finding(r, Label::Overfitting);
    // The same swings on a level training loss: validation worsening alone is not overfitting.
    let r = &reports_of(&[("training_history.csv", rows(0.0))])[0];
    assert!(!labels(r).contains(&Label::Overfitting), "{:?}", labels(r));
}

#[test]
fn a_short_run_whose_loss_never_moved_from_its_first_log_is_a_plateau() {
    // 35 logs over 700 steps (shorter than 2.5 patiences: its last 40 % spans less than one),
    // the LR decaying linearly from the first; the loss at 4.69 ± 0.01 throughout.
    let state = |fall: f64| {
        let rows: Vec<String> = (1..=35u64)
            .map(|i| {
                let (s, lr) = (20 * i, 5e-5 * (1.0 - (20 * i) as f64 / 720.0));
                let loss = 4.69 - fall * s as f64 / 700.0 + 0.02 * (jitter(i) - 0.5);
                format!(
                    r#"{{"step": {s}, "epoch": {}, "loss": {loss}, "learning_rate": {lr}}}"#,
                    s as f64 / 700.0
                )
            })
            .collect();
        history(700, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state(0.0))])[0];
    let f = finding(r, Label::Plateau);
    assert_eq!(f.evidence["never_improved"], 1.0);
    assert!(
        f.recommendation.contains("never improved from its first log"),
        "{}",
        f.recommendation
    );
    // The same run with its loss falling 10 % learned.
    let r = &reports_of(&[("trainer_state.json", state(0.47))])[0];
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", labels(r));
}

#[test]
fn a_loss_that_drifts_down_less_than_a_learning_run_gains_never_improved() {
    // An LLM fine-tune logged every 10 steps for 5,800 under a cosine from its first log, its
    // loss at 11.2 (near ln of its vocabulary) ± 2 % drifting down `fall` over the whole run:
    // 0.8 % is a change its 580 logs know well (it is more than its noise) but no learning.
    let state = |fall: f64| {
        let rows: Vec<String> = (1..=580u64)
            .map(|i| {
                let s = i * 10;
                let lr = 2.5e-5 * (1.0 + (std::f64::consts::PI * s as f64 / 5800.0).cos());
                let loss = 11.2 * (1.0 - fall * s as f64 / 5800.0) * (1.0 + 0.01 * (jitter(i) - 0.5));
                format!(r#"{{"step": {s}, "loss": {loss}, "learning_rate": {lr}}}"#)
            })
            .collect();
        history(5800, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state(0.008))])[0];
    let f = finding(r, Label::Plateau);
    assert_eq!(f.evidence["never_improved"], 1.0, "{f:?}");
    // The same run falling 5 % learned, slowly: its schedule's decay explains the flattening.
    let r = &reports_of(&[("trainer_state.json", state(0.05))])[0];
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", r.findings);
}

#[test]
fn a_training_loss_too_noisy_to_show_a_fall_is_no_plateau_while_validation_improves() {
    // 180 logs over 18,000 steps under a linear decay from the first, the training loss at 1.27
    // ± 0.15 throughout; 36 evaluations, falling 1.37 -> 1.29 (`val_fall`), or level.
    let state = |val_fall: f64| {
        let mut rows: Vec<String> = (1..=180u64)
            .map(|i| {
                let (s, lr) = (100 * i, 5e-5 * (1.0 - i as f64 / 181.0));
                let loss = 1.27 + 0.3 * (jitter(i) - 0.5);
                format!(r#"{{"step": {s}, "loss": {loss}, "learning_rate": {lr}}}"#)
            })
            .collect();
        rows.extend((1..=36u64).map(|i| {
            let v = 1.37 - val_fall * (1.0 - (-(i as f64) / 12.0).exp()) + 0.001 * (jitter(i + 999) - 0.5);
            format!(r#"{{"step": {}, "eval_loss": {v}}}"#, 500 * i)
        }));
        history(18000, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state(0.085))])[0];
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", labels(r));
    // Validation level too: nothing says the model learned.
    let r = &reports_of(&[("trainer_state.json", state(0.0))])[0];
    assert_eq!(finding(r, Label::Plateau).evidence["never_improved"], 1.0);
}

#[test]
fn the_largest_draw_of_a_heavy_tailed_batch_noise_is_no_spike_and_a_few_like_jumps_are() {
    // 6,000 per-step logs of a loss falling 2.0 -> 0.1 under Laplace noise in log space (scale
    // 0.12: jumps that thin out as they grow, the largest about 2x); with `spikes`, three 6x
    // jumps at steps 2,000, 3,500 and 5,000 too.
    let state = |spikes: bool| {
        let rows: Vec<String> = (1..=6000u64)
            .map(|s| {
                let u = jitter(s).clamp(1e-9, 1.0 - 1e-9);
                let laplace = if u < 0.5 {
                    0.12 * (2.0 * u).ln()
                } else {
                    -0.12 * (2.0 - 2.0 * u).ln()
                };
                let base = 0.1 + 1.9 * (-(s as f64) / 800.0).exp();
                let jump = if spikes && [2000, 3500, 5000].contains(&s) {
                    6.0
                } else {
                    1.0
                };
                let lr = 5e-5 * (1.0 - s as f64 / 6001.0);
                format!(
                    r#"{{"step": {s}, "loss": {}, "learning_rate": {lr}}}"#,
                    base * laplace.exp() * jump
                )
            })
            .collect();
        history(6000, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state(false))])[0];
    assert!(!labels(r).contains(&Label::LossSpike), "{:?}", labels(r));
    let r = &reports_of(&[("trainer_state.json", state(true))])[0];
    finding(r, Label::LossSpike);
}

#[test]
fn validation_worse_by_a_third_then_a_half_over_its_three_evaluations_is_overfitting() {
    // Ten epochs of 31 steps, the loss logged each epoch falling 0.59 -> 0.05; three evaluations
    // (every 100 steps), the first the best: too few for any patience.
    let train: Vec<(u64, f64)> = (1..=10u64)
        .map(|e| (31 * e, 0.59 * (-(e as f64 - 1.0) / 3.6).exp()))
        .collect();
    let eval = |v: [f64; 3]| -> Vec<(u64, f64, Option<f64>)> {
        v.iter()
            .enumerate()
            .map(|(i, v)| ((i as u64 + 1) * 100, *v, None))
            .collect()
    };
    let r = &reports_of(&[(
        "trainer_state.json",
        trainer_state(&train, &eval([0.3244, 0.4263, 0.5083]), 320),
    )])[0];
    let f = finding(r, Label::Overfitting);
    assert_eq!(f.evidence["best_step"], 100.0, "{f:?}");
    assert_eq!(f.evidence["rising_evals"], 2.0);
    // The same curve rising 5 % in all: validation levelling off, not yet overfitting.
    let r = &reports_of(&[(
        "trainer_state.json",
        trainer_state(&train, &eval([0.3244, 0.330, 0.3406]), 320),
    )])[0];
    assert!(!labels(r).contains(&Label::Overfitting), "{:?}", labels(r));
}

/// An object detector's losses over 150 epochs, as YOLOv5 logs them: the box loss falls on
/// training and validation alike; the objectness loss falls on training while on validation it
/// is lowest at epoch 65 and then rises 18 % (`obj_rise` false: it settles there).
fn detector_losses(obj_rise: bool) -> Vec<(u64, [f64; 4])> {
    (0..150u64)
        .map(|e| {
            let x = e as f64;
            let train_box = 0.03 + 0.09 * (-x / 30.0).exp();
            let train_obj = 0.010 + 0.014 * (-x / 50.0).exp() * (1.0 + 0.05 * (jitter(e) - 0.5));
            let val_box = 0.033 + 0.08 * (-x / 30.0).exp();
            let after = (x - 65.0).max(0.0);
            let val_obj = 0.00897 + 0.008 * (-x / 20.0).exp() + if obj_rise { 1.9e-5 * after } else { 0.0 };
            (e, [train_box, train_obj, val_box, val_obj])
        })
        .collect()
}

#[test]
fn a_loss_part_whose_validation_rises_is_overfitting_where_the_main_pair_does_not_show_it() {
    let csv = |rise: bool| {
        let rows: Vec<String> = detector_losses(rise)
            .iter()
            .map(|(e, v)| format!("{e},{},{},{},{}", v[0], v[1], v[2], v[3]))
            .collect();
        format!(
            "epoch,train/box_loss,train/obj_loss,val/box_loss,val/obj_loss\n{}\n",
            rows.join("\n")
        )
    };
    let r = &reports_of(&[("results.csv", csv(true))])[0];
    let f = finding(r, Label::Overfitting);
    assert!(
        f.recommendation.contains("`obj_loss` part"),
        "{}",
        f.recommendation
    );
    assert_eq!(f.evidence["best_step"], 65.0, "{f:?}");
    let r = &reports_of(&[("results.csv", csv(false))])[0];
    assert!(!labels(r).contains(&Label::Overfitting), "{:?}", labels(r));
}

#[test]
fn a_tensorboard_log_whose_steps_count_the_epochs_its_opt_yaml_states_is_judged_in_epochs() {
    // YOLOv5 writes each epoch's losses at step = the epoch, and its arguments to opt.yaml.
    use contrai_testkit::tfevents;
    let events: Vec<u8> = detector_losses(true)
        .iter()
        .flat_map(|(e, v)| {
            let tags = ["train/box_loss", "train/obj_loss", "val/box_loss", "val/obj_loss"];
            tags.iter()
                .zip(v)
                .flat_map(|(t, x)| tfevents::scalar(*e, t, *x as f32, false))
                .collect::<Vec<u8>>()
        })
        .collect();
    let dir = |opt: bool| {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("events.out.tfevents.1.host.0"), &events).unwrap();
        if opt {
            fs::write(
                d.path().join("opt.yaml"),
                "weights: yolov5s.pt\nepochs: 150\nbatch_size: 16\n",
            )
            .unwrap();
        }
        d
    };
    let d = dir(true);
    let r = &reports(d.path())[0];
    assert!(labels(r).contains(&Label::Overfitting), "{:?}", labels(r));
    // Without it, 84 epochs since the best are 84 steps: under a patience counted in steps.
    let d = dir(false);
    let r = &reports(d.path())[0];
    assert!(!labels(r).contains(&Label::Overfitting), "{:?}", labels(r));
}

#[test]
fn a_signed_policy_loss_has_no_spike_to_measure() {
    // A TRL GRPO run, 100 steps: on most steps every completion of a group got the same reward,
    // so the loss is the KL term alone (~1e-5); on steps 1, 40 and 70 it is the surrogate, of
    // either sign (`first` at step 1, +0.03 at the others).
    let state = |first: f64| {
        let rows: Vec<String> = (1..=100u64)
            .map(|s| {
                let loss = match s {
                    1 => first,
                    40 | 70 => 0.03,
                    _ => 1e-5 * (1.0 + jitter(s)),
                };
                format!(r#"{{"step": {s}, "loss": {loss}, "learning_rate": 5e-6}}"#)
            })
            .collect();
        history(200, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state(-0.02))])[0];
    assert!(!labels(r).contains(&Label::LossSpike), "{:?}", r.findings);
    // The same jumps in a loss that never went below zero are spikes.
    let r = &reports_of(&[("trainer_state.json", state(0.02))])[0];
    assert!(labels(r).contains(&Label::LossSpike), "{:?}", r.findings);
}

#[test]
fn a_second_run_appended_to_the_log_that_starts_worse_is_no_overfitting() {
    // An SFT script that opens its metrics file in append mode, launched twice: the first run
    // logs steps 0-1644 (val 2.73 -> 1.99, new lows throughout), the second starts over from
    // step 0 at a worse level (val 2.90, train 3.04) and falls to 2.22 by step 7296 — above
    // the first run's best all along. `second(x)` is the second run's training loss at x in 0..1.
    let log = |second: &dyn Fn(f64) -> f64| {
        let mut rows = Vec::new();
        for i in 0..=137u64 {
            let x = i as f64 / 137.0;
            let (train, val) = (2.6 - 0.55 * x + 0.03 * jitter(i), 2.73 - 0.74 * x);
            rows.push(format!(
                r#"{{"step": {}, "train_loss": {train}, "val_loss": {val}, "lr": 1e-07}}"#,
                12 * i
            ));
        }
        for i in 0..=114u64 {
            let x = i as f64 / 114.0;
            let (train, val) = (second(x) + 0.03 * jitter(i + 500), 2.90 - 0.68 * x);
            rows.push(format!(
                r#"{{"step": {}, "train_loss": {train}, "val_loss": {val}, "lr": 1e-07}}"#,
                64 * i
            ));
        }
        rows.join("\n") + "\n"
    };
    let r = &reports_of(&[("metrics.jsonl", log(&|x| 3.04 - 0.76 * x))])[0];
    assert!(
        labels(r).contains(&Label::ResumeDiscontinuity),
        "{:?}",
        r.findings
    );
    assert!(!labels(r).contains(&Label::Overfitting), "{:?}", r.findings);
    // A second run whose training loss goes far below the first's while its validation stays
    // above the first's best: fitting its training set, not generalising — overfitting.
    let r = &reports_of(&[("metrics.jsonl", log(&|x| 3.04 - 2.6 * x))])[0];
    assert!(labels(r).contains(&Label::Overfitting), "{:?}", r.findings);
}

#[test]
fn a_loss_by_the_epoch_stalled_through_lr_cuts_that_escapes_late_is_a_plateau() {
    // A chess decision transformer, 100 epochs: its training loss at 0.0334 from epoch 2 to 46
    // while ReduceLROnPlateau halves the LR four times (the last at epoch 21), then falling to
    // 0.0243 by epoch 100 at the last LR. `loss(e)` is the loss of epoch e.
    let csv = |loss: &dyn Fn(f64) -> f64| {
        let rows: Vec<String> = (1..=100u64)
            .map(|e| {
                let lr = 1e-3 * 0.5f64.powi(((e.saturating_sub(5)) / 4).min(4) as i32);
                format!("{e},{},{lr}", loss(e as f64) + 1e-5 * jitter(e))
            })
            .collect();
        format!("epoch,loss,lr\n{}\n", rows.join("\n"))
    };
    let escape = |x: f64| {
        if x <= 46.0 {
            0.0334
        } else {
            0.0243 + 0.0091 * (-(x - 46.0) / 15.0).exp()
        }
    };
    let r = &reports_of(&[("loss_log.csv", csv(&escape))])[0];
    assert!(labels(r).contains(&Label::Plateau), "{:?}", r.findings);
    // The same fall from the first epochs on: a run that learned, then converged.
    let learns = |x: f64| 0.0243 + 0.02 * (-x / 15.0).exp();
    let r = &reports_of(&[("loss_log.csv", csv(&learns))])[0];
    assert!(!has_evidence(r, "stall_improvement"), "{:?}", r.findings);
}
