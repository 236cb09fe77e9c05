//! LR schedules of real runs: warmups too long for a short run, a run ended inside its warmup,
//! schedules and warmups stated but not logged, no warmup where the loss rises, resumes and warm
//! restarts.

use super::*;

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
        history(75, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state(10))])[0];
    assert!(!labels(r).contains(&Label::LrWarmupTooLong), "{:?}", labels(r));
    let r = &reports_of(&[("trainer_state.json", state(25))])[0];
    assert!(labels(r).contains(&Label::LrWarmupTooLong), "{:?}", labels(r));
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
        history(2000, &rows)
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
        history(2000, &rows)
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
        history(1000, &rows)
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
fn a_quiet_loss_that_climbs_a_quarter_at_a_peak_lr_and_stays_up_is_a_warmup_too_short() {
    // 7,400 steps under linear decay from the peak at step 0, a log every 100 steps; the loss
    // wobbles ±0.005 around its course.
    let state = |loss: &dyn Fn(u64) -> f64| {
        let rows: Vec<String> = (1..=74u64)
            .map(|i| {
                let s = i * 100;
                let lr = 1e-2 * (1.0 - s as f64 / 7460.0);
                let wobble = 0.005 * ((i * 7919 % 11) as f64 / 5.0 - 1.0);
                format!(
                    r#"{{"step": {s}, "loss": {}, "learning_rate": {lr}}}"#,
                    loss(s) + wobble
                )
            })
            .collect();
        history(7460, &rows)
    };
    // 1.25 at the first log, up to 1.56 by step 500, then 1.40 for good: 1.25x, not 1.5x, but
    // sixty noise units and every early log above the first.
    let climbs = |s: u64| match s {
        100 => 1.25,
        200..=500 => 1.25 + 0.31 * (s - 100) as f64 / 400.0,
        _ => 1.40,
    };
    let r = &reports_of(&[("trainer_state.json", state(&climbs))])[0];
    assert_eq!(
        finding(r, Label::LrWarmupTooShort).evidence["early_high_step"],
        500.0
    );
    // The same climb lost in a loss that swings ±0.3 from log to log is no finding.
    let noise: Vec<f64> = {
        let mut n = contrai_testkit::Noise(7);
        (0..=74).map(|_| 0.3 * n.next()).collect()
    };
    let noisy = |s: u64| climbs(s) + noise[(s / 100) as usize];
    let r = &reports_of(&[("trainer_state.json", state(&noisy))])[0];
    assert!(!labels(r).contains(&Label::LrWarmupTooShort), "{:?}", r.findings);
}

#[test]
fn a_new_schedule_begun_where_the_last_ended_is_a_resume_even_when_its_cycles_look_planned() {
    // Logged every 5 steps to 600: a linear decay from `peaks[0]` that ends at 0 at step 60, a
    // new one from `peaks[1]` to 0 at step 300, a third from `peaks[2]` decaying slowly (a run
    // launched again twice with a longer max_steps). Cycles of 60 and 240 steps: the 1:4 law of
    // SGDR's `T_mult`.
    let state = |peaks: [f64; 3]| {
        let rows: Vec<String> = (1..=120u64)
            .map(|i| {
                let s = 5 * i;
                let lr = match s {
                    ..=60 => peaks[0] * (60 - s) as f64 / 55.0,
                    61..=300 => peaks[1] * (300 - s) as f64 / 235.0,
                    _ => peaks[2] * (1.0 - (s - 305) as f64 / 2000.0),
                };
                let loss = 0.7 + 0.05 * (jitter(i) - 0.5);
                format!(r#"{{"step": {s}, "loss": {loss}, "learning_rate": {lr}}}"#)
            })
            .collect();
        history(600, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state([3e-4, 2.4e-4, 3e-4]))])[0];
    let f = finding(r, Label::ResumeDiscontinuity);
    assert_eq!(f.step, 65);
    // The same cycles restarting at one peak are a warm-restart schedule: no resume.
    let r = &reports_of(&[("trainer_state.json", state([3e-4, 3e-4, 3e-4]))])[0];
    assert!(
        !labels(r).contains(&Label::ResumeDiscontinuity),
        "{:?}",
        labels(r)
    );
}

#[test]
fn a_loss_that_jumps_again_and_again_at_a_peak_lr_early_and_never_after_had_too_short_a_warmup() {
    // 100 epochs at a constant 1e-3 (no warmup), cut to 5e-4 at epoch 17: the first epoch's
    // loss is a blow-up (no reference to rise from), then the loss jumps several times over
    // epochs 6-14 (`early`) and settles; or it also jumps once late (`late`): noise of its own.
    let csv = |early: bool, late: bool| {
        let mut out = String::from("epoch,train_loss,val_loss,lr\n");
        for e in 1..=100u64 {
            let base = 0.3 * (-(e as f64) / 30.0).exp() + 0.03 + 0.01 * jitter(e);
            let jump = match e {
                6 | 10 | 14 if early => 40.0,
                60 if late => 40.0,
                _ => 1.0,
            };
            let loss = if e == 1 { 10462.0 } else { base * jump };
            let lr = if e < 17 { 1e-3 } else { 5e-4 };
            out += &format!("{e},{loss},{},{lr}\n", base * 1.2);
        }
        out
    };
    let r = &reports_of(&[("training_log.csv", csv(true, false))])[0];
    let f = finding(r, Label::LrWarmupTooShort);
    assert_eq!(f.evidence["early_high_step"], 6.0, "{:?}", f.evidence);
    for (early, late) in [(true, true), (false, false)] {
        let r = &reports_of(&[("training_log.csv", csv(early, late))])[0];
        assert!(
            !labels(r).contains(&Label::LrWarmupTooShort),
            "{early} {late}: {:?}",
            labels(r)
        );
    }
}

#[test]
fn a_one_cycle_warmup_under_a_quarter_of_the_run_is_no_finding_and_one_of_three_tenths_is() {
    // OneCycleLR over 5,880 steps logged every 50, peaking at `pct` of the run, then annealing
    // to near 0; the loss falls throughout.
    let state = |pct: f64| {
        let peak = pct * 5880.0;
        let rows: Vec<String> = (1..=117u64)
            .map(|i| {
                let s = 50 * i;
                let x = s as f64;
                let lr = if x <= peak {
                    0.02 + 0.55 * (1.0 - (std::f64::consts::PI * x / peak).cos()) / 2.0
                } else {
                    0.57 * (1.0 + (std::f64::consts::PI * (x - peak) / (5880.0 - peak)).cos()) / 2.0
                };
                let loss = 0.05 + 1.7 * (-x / 1500.0).exp();
                format!(r#"{{"step": {s}, "loss": {loss}, "learning_rate": {lr}}}"#)
            })
            .collect();
        history(5880, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state(0.23))])[0];
    assert!(!labels(r).contains(&Label::LrWarmupTooLong), "{:?}", labels(r));
    let r = &reports_of(&[("trainer_state.json", state(0.3))])[0];
    assert!(labels(r).contains(&Label::LrWarmupTooLong), "{:?}", labels(r));
}

#[test]
fn a_schedule_begun_again_from_a_shallow_decay_is_a_resume() {
    // A linear decay from 3e-5 over 11,880 steps, a log every 10; at step 1,010 (8 % down) the
    // LR is back at its start on a schedule of 10,250 steps and the loss as high as at step 300
    // (a job launched again on another plan, from an earlier state), or (`again` false) both go on.
    let state = |again: bool| {
        let rows: Vec<String> = (1..=400u64)
            .map(|i| {
                let s = 10 * i;
                let (lr, x) = if again && s > 1000 {
                    (3e-5 * (1.0 - (s - 1000) as f64 / 10250.0), s - 700)
                } else {
                    (3e-5 * (1.0 - s as f64 / 11880.0), s)
                };
                let loss = 1.0 + 2.0 * (-(x as f64) / 300.0).exp() + 0.05 * jitter(i);
                format!(r#"{{"step": {s}, "loss": {loss}, "learning_rate": {lr}}}"#)
            })
            .collect();
        history(10250, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state(true))])[0];
    assert_eq!(finding(r, Label::ResumeDiscontinuity).step, 1010);
    let r = &reports_of(&[("trainer_state.json", state(false))])[0];
    assert!(
        !labels(r).contains(&Label::ResumeDiscontinuity),
        "{:?}",
        labels(r)
    );
}

#[test]
fn a_trainer_state_whose_epoch_counts_anew_is_judged_by_its_values() {
    // 100 steps under one linear LR, the loss falling smoothly; the epoch counts 0.04 a step
    // and (`anew`) starts again at steps 29 and 72, where (`jump`) the gradient norm leaps from
    // ~3 to ~40 for a few steps, as an optimizer begun again without its state does.
    let state = |anew: bool, jump: bool| {
        let rows: Vec<String> = (1..=100u64)
            .map(|s| {
                let from = if !anew { 0 } else if s >= 72 { 71 } else if s >= 29 { 28 } else { 0 };
                let epoch = 0.04 * (s - from) as f64;
                let loss = 2.0 + 6.0 * (-(s as f64) / 40.0).exp() + 0.05 * jitter(s);
                let since = s - from;
                let grad = if jump && from > 0 && since <= 3 { 40.0 / since as f64 } else { 3.0 } + 0.3 * jitter(s + 5);
                let lr = 1e-4 * (1.0 - s as f64 / 101.0);
                format!(
                    r#"{{"step": {s}, "epoch": {epoch}, "loss": {loss}, "grad_norm": {grad}, "learning_rate": {lr}}}"#
                )
            })
            .collect();
        history(100, &rows)
    };
    let r = &reports_of(&[("trainer_state.json", state(true, true))])[0];
    let f = finding(r, Label::ResumeDiscontinuity);
    assert_eq!(f.step, 29);
    match &f.detail {
        Some(Detail::Resume(res)) => {
            assert_eq!(
                res.boundaries[0].marker,
                Some(contrai_doctor::Marker::EpochRestart)
            );
            assert!(
                res.boundaries[0]
                    .breaks
                    .contains(&contrai_doctor::Break::GradJump),
                "{res:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A streamed dataset's epoch counting anew while every value goes on: no resume to report.
    for (anew, jump) in [(true, false), (false, false)] {
        let r = &reports_of(&[("trainer_state.json", state(anew, jump))])[0];
        assert!(
            !labels(r).contains(&Label::ResumeDiscontinuity),
            "{:?}",
            r.findings
        );
    }
}

#[test]
fn a_warmup_in_steps_is_no_share_of_a_log_counted_in_epochs() {
    // A translation transformer's history (lists by the epoch, 44 of 100 planned) with its
    // config beside: a 1000-step warmup, which is no share of 44 epochs.
    let lists = |n: usize| -> String {
        (0..n)
            .map(|e| format!("{}", 6.3 * (-(e as f64) / 30.0).exp()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let text = format!(
        r#"{{"config": {{"warmup_steps": 1000, "epochs": 100, "learning_rate": 5e-6}},
            "train_losses": [{}], "val_losses": [{}]}}"#,
        lists(44),
        lists(44)
    );
    let r = &reports_of(&[("training_history.json", text)])[0];
    assert!(!labels(r).contains(&Label::LrWarmupTooLong), "{:?}", r.findings);
    // Its warmup in epochs is a share the files tell: 30 of 100.
    let text = format!(
        r#"{{"config": {{"warmup_epochs": 30, "epochs": 100}}, "train_losses": [{}], "val_losses": [{}]}}"#,
        lists(44),
        lists(44)
    );
    let r = &reports_of(&[("training_history.json", text)])[0];
    let f = finding(r, Label::LrWarmupTooLong);
    // The log counts no steps: the advice names none.
    assert!(
        f.recommendation.contains("30 % of the run"),
        "{}",
        f.recommendation
    );
    assert!(!f.evidence.contains_key("total_steps"), "{f:?}");
}
