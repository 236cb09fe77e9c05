//! Stuck at chance on real runs' patterns: ln K with K from the files beside a log, a classifier
//! fallen back to its prior, a probe at one in K, a language model's loss near ln 5 that is not.

use super::*;

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
fn a_loss_that_climbed_to_ln_k_and_settled_there_with_its_last_accuracy_at_one_in_k_is_stuck() {
    // No class count in any file: K is the one whose ln K the loss settles at (ln 4 = 1.386),
    // confirmed by the one evaluation's accuracy at 1/4.
    let train: Vec<(u64, f64)> = (1..=74u64)
        .map(|i| {
            let s = i * 100;
            let v = match s {
                100 => 1.25,
                200..=500 => 1.25 + 0.31 * (s - 100) as f64 / 400.0,
                _ => 1.40 - 0.01 * (s as f64 / 7400.0),
            };
            (s, v)
        })
        .collect();
    let at = |acc: f64| trainer_state(&train, &[(7460, 1.3839, Some(acc))], 7460);
    let r = &reports_of(&[("trainer_state.json", at(0.2516))])[0];
    assert_eq!(finding(r, Label::StuckAtChance).evidence["classes"], 4.0);
    // The same loss with an accuracy far above 1/K: it learned something; no verdict of chance.
    let r = &reports_of(&[("trainer_state.json", at(0.61))])[0];
    assert!(!labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
}

#[test]
fn a_classifier_learning_until_its_loss_turns_nan_is_no_chance_level() {
    // Keras CSVLogger, 4000 identities (no config beside the log): the loss falls from 7.36 to
    // 3.74 (about ln 42) in 33 epochs, then is NaN; the accuracy at the NaN epochs is 0.0001.
    let rows: Vec<String> = (0..38u64)
        .map(|e| {
            let x = e as f64;
            if e < 33 {
                let loss = 3.6 + 3.76 * (-x / 8.0).exp();
                format!(
                    "{e},{},{loss},{},{}",
                    0.27 * (1.0 - (-x / 10.0).exp()),
                    0.35 * (1.0 - (-x / 10.0).exp()),
                    loss - 0.3
                )
            } else {
                format!("{e},0.000105,nan,0.0,nan")
            }
        })
        .collect();
    let r = &reports_of(&[(
        "training_log.csv",
        format!("epoch,accuracy,loss,val_accuracy,val_loss\n{}\n", rows.join("\n")),
    )])[0];
    assert!(labels(r).contains(&Label::Nonfinite), "{:?}", labels(r));
    assert!(!labels(r).contains(&Label::StuckAtChance), "{:?}", labels(r));
}

#[test]
fn a_validation_loss_at_exactly_ln_k_at_every_evaluation_is_stuck_whatever_the_task() {
    // An MLP on CIFAR-10 under SGD, nothing beside the log to say it classifies: the per-step
    // loss wanders 0.3 % around ln 10, the validation loss sits at ln 10 to 1e-4 at all ten
    // epoch ends.
    let mut n = contrai_testkit::Noise(5);
    let mut rows = Vec::new();
    for e in 0..10u64 {
        for i in 0..62u64 {
            let s = e * 625 + i * 10;
            rows.push(format!("{e},{s},{:.4},", 10f64.ln() * (1.0 + 0.0015 * n.next())));
        }
        rows.push(format!(
            "{e},{},,{:.5}",
            e * 625 + 624,
            10f64.ln() - 0.000015 * e as f64
        ));
    }
    let r = &reports_of(&[(
        "metrics.csv",
        format!("epoch,step,train_loss,val_loss\n{}\n", rows.join("\n")),
    )])[0];
    let f = finding(r, Label::StuckAtChance);
    assert_eq!(f.evidence["classes"], 10.0);
}

#[test]
fn a_validation_accuracy_below_one_in_k_with_k_known_is_no_learning() {
    // Seven classes (hparams.yaml) under a class-weighted loss (its level above ln 7): the
    // validation accuracy stays near 0.09, under 1/7, for 19 epochs while the loss creeps 3 %.
    let mut n = contrai_testkit::Noise(3);
    let mut rows = Vec::new();
    for e in 0..19u64 {
        for i in 0..6u64 {
            let s = e * 318 + i * 50 + 49;
            rows.push(format!("{e},{s},{:.4},,", 3.1 * (1.0 + 0.3 * n.next())));
        }
        let val = 3.25 - 0.006 * e as f64;
        rows.push(format!(
            "{e},{},,{val:.4},{:.4}",
            e * 318 + 317,
            0.09 + 0.01 * n.next()
        ));
    }
    let rs = reports_of(&[
        (
            "metrics.csv",
            format!(
                "epoch,step,train_loss_step,val_loss,val_acc_epoch\n{}\n",
                rows.join("\n")
            ),
        ),
        ("hparams.yaml", "num_classes: 7\nlearning_rate: 0.001\n".into()),
    ]);
    assert!(
        labels(&rs[0]).contains(&Label::StuckAtChance),
        "{:?}",
        labels(&rs[0])
    );
}
