//! Losses and predictions that never move: a loss frozen from its first log, an RL surrogate
//! at 0 that is no such run, a validation accuracy frozen at one class, a language model at ln
//! of its vocabulary.

use super::*;

#[test]
fn a_loss_frozen_at_zero_from_its_first_log_trains_nothing() {
    // 25 logs every 10 steps of 500 planned: warmup to 1e-4 by step 60, then cosine; the loss and
    // the gradient norm as `loss(i)` and `grad(i)` give them.
    let state = |loss: &dyn Fn(u64) -> String, grad: &dyn Fn(u64) -> String| {
        let rows: Vec<String> = (1..=25u64)
            .map(|i| {
                let s = 10 * i;
                let lr = if s <= 60 {
                    1e-4 * s as f64 / 60.0
                } else {
                    5e-5 * (1.0 + (std::f64::consts::PI * (s - 60) as f64 / 440.0).cos())
                };
                format!(
                    r#"{{"step": {s}, "loss": {}, "grad_norm": {}, "learning_rate": {lr}}}"#,
                    loss(i),
                    grad(i)
                )
            })
            .collect();
        history(500, &rows)
    };
    let zero = |_: u64| "0.0".to_string();
    let r = &reports_of(&[("trainer_state.json", state(&zero, &zero))])[0];
    let f = finding(r, Label::Plateau);
    assert_eq!(f.evidence["frozen_loss"], 0.0, "{f:?}");
    assert!(f.recommendation.contains("masked"), "{}", f.recommendation);
    // Its gradient NaN at every step: fp16's scaler skipped them all, which `nonfinite` says.
    let r = &reports_of(&[("trainer_state.json", state(&zero, &|_| "NaN".into()))])[0];
    assert!(labels(r).contains(&Label::Nonfinite), "{:?}", labels(r));
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", labels(r));
}

#[test]
fn an_rl_surrogate_loss_at_zero_with_steps_of_no_gradient_is_no_plateau_nor_a_vanishing_gradient() {
    // A GRPO policy loss: 0.0 at most of 1,000 logs (groups whose rewards were all equal give no
    // gradient), tiny values of either sign between; the norm 0 at those steps, ~0.05 elsewhere.
    let rows: Vec<String> = (1..=1000u64)
        .map(|s| {
            let live = jitter(s) < 0.3 || s < 200;
            let (loss, grad) = if live {
                (2e-4 * (jitter(s + 7) - 0.5), 0.02 + 0.08 * jitter(s + 13))
            } else {
                (0.0, 0.0)
            };
            let lr = 3e-5 * (s.min(100) as f64 / 100.0);
            format!(r#"{{"step": {s}, "loss": {loss}, "grad_norm": {grad}, "learning_rate": {lr}}}"#)
        })
        .collect();
    let r = &reports_of(&[("trainer_state.json", history(15000, &rows))])[0];
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", r.findings);
    assert!(!labels(r).contains(&Label::GradVanish), "{:?}", r.findings);
}

#[test]
fn a_validation_accuracy_frozen_at_one_class_while_nothing_reaches_validation_is_a_plateau() {
    // A Keras binary classifier, 16 epochs: validation accuracy exactly 22/85 (one class for
    // every image) at every epoch; the training loss falls a quarter (5.18 -> 3.93); validation
    // loss `val(e)`.
    let csv = |val: &dyn Fn(f64) -> f64| {
        let rows: Vec<String> = (0..16u64)
            .map(|e| {
                let x = e as f64;
                let train = 3.9 + 1.3 * (-x / 3.0).exp();
                format!("{e},{train},{},{}", 22.0 / 85.0, val(x))
            })
            .collect();
        format!("epoch,loss,val_accuracy,val_loss\n{}\n", rows.join("\n"))
    };
    let r = &reports_of(&[(
        "training_log.csv",
        csv(&|x| 6.98 + 3.4 * (1.0 - (-x / 4.0).exp())),
    )])[0];
    let f = finding(r, Label::Plateau);
    assert_eq!(f.evidence["frozen_val_accuracy"], 22.0 / 85.0, "{f:?}");
    // The same accuracy with a validation loss that falls: the model learns, its predictions
    // not yet across the threshold — no frozen predictions to report.
    let r = &reports_of(&[("training_log.csv", csv(&|x| 0.9 - 0.3 * (1.0 - (-x / 4.0).exp())))])[0];
    assert!(!has_evidence(r, "frozen_val_accuracy"), "{:?}", r.findings);
}

#[test]
fn a_validation_accuracy_frozen_at_one_class_for_its_first_third_is_a_plateau_it_left() {
    // 20 epochs of a binary classifier on a 718-image validation set: its accuracy exactly the
    // majority share (615/718) for the first `frozen` epochs, then rising as it learns.
    let csv = |frozen: u64| {
        let rows: Vec<String> = (0..20u64)
            .map(|e| {
                let x = e as f64;
                let acc = if e < frozen {
                    615.0 / 718.0
                } else {
                    (615.0 + 2.0 * (e + 1 - frozen) as f64) / 718.0
                };
                let train = 0.8 * (-x / 10.0).exp();
                let val = 0.28 + 0.14 * (-(x - frozen as f64).max(0.0) / 4.0).exp();
                format!("{e},{train},{acc},{val}")
            })
            .collect();
        format!("epoch,loss,val_accuracy,val_loss\n{}\n", rows.join("\n"))
    };
    let r = &reports_of(&[("history_log.csv", csv(7))])[0];
    let f = finding(r, Label::Plateau);
    assert_eq!(f.evidence["evaluations"], 7.0, "{f:?}");
    // Frozen for its first two epochs only: no stretch worth a finding.
    let r = &reports_of(&[("history_log.csv", csv(2))])[0];
    assert!(!has_evidence(r, "frozen_val_accuracy"), "{:?}", r.findings);
    // Every image right for its first seven epochs, one wrong after: no stall.
    let perfect = csv(7).replace(&(615.0f64 / 718.0).to_string(), "1.0");
    let r = &reports_of(&[("history_log.csv", perfect)])[0];
    assert!(!has_evidence(r, "frozen_val_accuracy"), "{:?}", r.findings);
}

#[test]
fn a_language_model_at_ln_of_its_vocabulary_all_run_learned_nothing() {
    // A 100-step DPO test of tiny-gpt2 (config.json: vocab 50257): the loss is 10.820-10.825,
    // ln 50257 = 10.825, at all ten logs while the LR decays.
    let train: Vec<(u64, f64)> = (1..=10u64)
        .map(|i| (i * 10, 10.8204 + 0.0005 * (i % 4) as f64))
        .collect();
    let config = r#"{"architectures": ["GPT2LMHeadModel"], "vocab_size": 50257}"#;
    let r = &reports_of(&[
        ("trainer_state.json", trainer_state(&train, &[], 100)),
        ("config.json", config.into()),
    ])[0];
    assert_eq!(finding(r, Label::Plateau).evidence["vocab_size"], 50257.0);
    // The same loss falling from ln V (a model from scratch) learns.
    let falling: Vec<(u64, f64)> = (1..=10u64).map(|i| (i * 10, 10.82 - 0.4 * i as f64)).collect();
    let r = &reports_of(&[
        ("trainer_state.json", trainer_state(&falling, &[], 100)),
        ("config.json", config.into()),
    ])[0];
    assert!(!labels(r).contains(&Label::Plateau), "{:?}", labels(r));
}

#[test]
fn a_masked_language_model_logged_three_times_at_ln_of_its_vocabulary_learned_nothing() {
    // A tiny BERT pretrained from scratch (config.json: vocab 500), 1,930 steps logged at the
    // Trainer's default every 500: 6.2055, 6.1910, 6.1816 against ln 500 = 6.2146.
    let config = r#"{"architectures": ["BertForMaskedLM"], "vocab_size": 500}"#;
    let run = |train: &[(u64, f64)]| {
        reports_of(&[
            ("trainer_state.json", trainer_state(train, &[], 1930)),
            ("config.json", config.into()),
        ])
        .remove(0)
    };
    let r = run(&[(500, 6.2055), (1000, 6.1910), (1500, 6.1816)]);
    assert_eq!(finding(&r, Label::Plateau).evidence["vocab_size"], 500.0);
    // Two logs tell no course; three that fall away from ln V learn.
    let r = run(&[(500, 6.2055), (1000, 6.1910)]);
    assert!(!labels(&r).contains(&Label::Plateau), "{:?}", labels(&r));
    let r = run(&[(500, 6.1), (1000, 5.2), (1500, 4.6)]);
    assert!(!labels(&r).contains(&Label::Plateau), "{:?}", labels(&r));
}

#[test]
fn a_validation_loss_that_never_improved_while_the_training_loss_fell_is_no_healthy_run() {
    // A Keras CNN on stock prices, 100 epochs, MAE: the training loss falls 4.3 -> 1.1 while the
    // validation MAE (a later period, prices on another scale) stays at 24-26 with ±7 % noise.
    let csv = |val: &dyn Fn(f64) -> f64| {
        let rows: Vec<String> = (0..100u64)
            .map(|e| {
                let x = e as f64;
                let train = 1.1 + 3.2 * (-x / 4.0).exp();
                let noise = 0.07 * (2.0 * jitter(e) - 1.0);
                format!("{e},{train},{}", val(x) * (1.0 + noise))
            })
            .collect();
        format!(",loss,val_loss\n{}\n", rows.join("\n"))
    };
    let r = &reports_of(&[("history_cnn.csv", csv(&|_| 24.8))])[0];
    let f = finding(r, Label::Plateau);
    assert_eq!(f.evidence["evaluations"], 100.0, "{f:?}");
    // Validation that fell with it generalises; one that fell and then rose overfits.
    let r = &reports_of(&[("history_cnn.csv", csv(&|x| 3.0 + 22.0 * (-x / 4.0).exp()))])[0];
    assert!(!has_evidence(r, "val_loss_lowest"), "{:?}", r.findings);
    let r = &reports_of(&[("history_cnn.csv", csv(&|x| 20.0 + 0.1 * (x - 30.0).abs()))])[0];
    assert!(!has_evidence(r, "val_loss_lowest"), "{:?}", r.findings);
}
