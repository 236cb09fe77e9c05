//! Harder synthetic runs, each with the labels a correct doctor must and must not report.

use super::*;

/// One synthetic run with the labels a correct doctor must and must not report.
struct Case {
    name: &'static str,
    run: Run,
    want: Vec<Label>,
    must_not: Vec<Label>,
}

fn case(name: &'static str, run: Run, want: &[Label], must_not: &[Label]) -> Case {
    Case {
        name,
        run,
        want: want.to_vec(),
        must_not: must_not.to_vec(),
    }
}

/// A 4-class run whose validation never leaves chance (loss ≈ ln 4, accuracy ≈ 1/4) while its
/// training loss drifts a few per cent below its start; `learns`: both fall instead.
fn never_learns(learns: bool, seed: u64) -> Run {
    let mut n = Noise(seed);
    let chance = 4f64.ln();
    let learnt = |step: f64| {
        if learns {
            1.0 - 0.6 * (1.0 - (-step / 800.0).exp())
        } else {
            1.0
        }
    };
    let train: Vec<(u64, f64)> = (1..=300)
        .map(|i| {
            let drift = 1.02 - 0.06 * i as f64 / 300.0;
            (
                i * 10,
                chance * drift * learnt(i as f64 * 10.0) * (1.0 + 0.01 * n.next()),
            )
        })
        .collect();
    let val: Vec<(u64, f64)> = (1..=30)
        .map(|i| {
            let drop = if learns {
                0.5 * (1.0 - (-(i as f64) / 8.0).exp())
            } else {
                0.0
            };
            (i * 100, chance * (1.0 - drop) * (1.0 + 0.01 * n.next()))
        })
        .collect();
    let acc: Vec<(u64, f64)> = val
        .iter()
        .map(|&(s, v)| {
            (
                s,
                if learns {
                    1.0 - v / chance * 0.75
                } else {
                    0.25 + 0.01 * n.next()
                },
            )
        })
        .collect();
    let lr = train.iter().map(|&(s, _)| (s, cosine_lr(s, 90, 3e-4))).collect();
    run(
        vec![
            (Series::TrainLoss, train),
            (Series::ValLoss, val),
            (Series::ValAccuracy, acc),
            (Series::Lr, lr),
        ],
        XUnit::Step,
    )
}

/// An epoch log whose first validation is a huge outlier (a bad first epoch), then falls to its
/// best at epoch `best` and rises `rise` (relative) over the epochs after, with 0.4 % noise;
/// the training loss falls throughout.
fn outlier_then_rise(rise: f64, seed: u64) -> Run {
    let mut n = Noise(seed);
    let best = 10;
    let epochs = 17;
    let val: Vec<(u64, f64)> = (0..epochs)
        .map(|e| {
            let v = if e == 0 {
                9.0
            } else if e <= best {
                0.6 + 0.6 * (-(e as f64 - 1.0) / 2.5).exp()
            } else {
                (0.6 + 0.6 * (-(best as f64 - 1.0) / 2.5).exp())
                    * (1.0 + rise * (e - best) as f64 / (epochs - 1 - best) as f64)
            };
            (e, v * (1.0 + 0.004 * n.next()))
        })
        .collect();
    let train: Vec<(u64, f64)> = (0..epochs)
        .map(|e| (e, 1.5 * (-(e as f64) / 6.0).exp() + 0.05))
        .collect();
    run(
        vec![(Series::TrainLoss, train), (Series::ValLoss, val)],
        XUnit::Epoch,
    )
}

/// An epoch log whose validation reaches its best at epoch 8 and then rises at each of the last
/// four epochs, `4 · rise` in all (0: it wobbles flat), while the training loss falls by a third
/// after the best (`train_falls`; else it stays flat).
fn sustained_rise(rise: f64, train_falls: bool) -> Run {
    let rising = rise > 0.0;
    let val: Vec<(u64, f64)> = (0..13)
        .map(|e| {
            let v = if e <= 8 {
                0.5 + 0.5 * (-(e as f64) / 2.0).exp()
            } else if rising {
                (0.5 + 0.5 * (-8.0f64 / 2.0).exp()) * (1.0 + rise * (e - 8) as f64)
            } else {
                (0.5 + 0.5 * (-8.0f64 / 2.0).exp()) * (1.0 + if e % 2 == 0 { 0.002 } else { -0.001 })
            };
            (e, v)
        })
        .collect();
    let train: Vec<(u64, f64)> = (0..13)
        .map(|e| {
            let after = (e as f64 - 8.0).max(0.0);
            let fall = if train_falls { 0.09 * after } else { 0.0 };
            (e, (0.45 + 0.6 * (-(e as f64) / 2.0).exp()) * (1.0 - fall))
        })
        .collect();
    run(
        vec![(Series::TrainLoss, train), (Series::ValLoss, val)],
        XUnit::Epoch,
    )
}

/// The healthy run with one step's loss 17x and gradient norm 100x at step 1500; `clip` says the
/// run clips at 1.0; `lasting` keeps the loss 3x higher after it.
fn lone_spike(clip: bool, lasting: bool) -> Run {
    let base = healthy_series(37);
    let train: Vec<(u64, f64)> = base[0]
        .1
        .iter()
        .map(|&(s, v)| match s {
            1500 => (s, v * 17.0),
            s if lasting && s > 1500 => (s, v * 3.0),
            _ => (s, v),
        })
        .collect();
    let grad: Vec<(u64, f64)> = base[3]
        .1
        .iter()
        .map(|&(s, v)| (s, if s == 1500 { v * 100.0 } else { v }))
        .collect();
    let mut r = run(
        with(with(base, Series::TrainLoss, train), Series::GradNorm, grad),
        XUnit::Step,
    );
    r.hints.clip_norm = clip.then_some(1.0);
    r
}

/// The healthy run in a run that clips at 1.0, with a one-step spike (loss 17x, gradient norm
/// 100x) every `every` steps from step 1000 on, each gone at the next log.
fn recurring_spikes(every: u64) -> Run {
    let base = healthy_series(53);
    let spiked = |s: u64| s >= 1000 && (s - 1000) % every == every / 2;
    let scale = |series: &[(u64, f64)], by: f64| -> Vec<(u64, f64)> {
        series
            .iter()
            .map(|&(s, v)| (s, if spiked(s) { v * by } else { v }))
            .collect()
    };
    let (train, grad) = (scale(&base[0].1, 17.0), scale(&base[3].1, 100.0));
    let mut r = run(
        with(with(base, Series::TrainLoss, train), Series::GradNorm, grad),
        XUnit::Step,
    );
    r.hints.clip_norm = Some(1.0);
    r
}

/// The synthetic set: each pattern the doctor must see, and a control for each.
fn cases() -> Vec<Case> {
    use Label::*;
    vec![
        case(
            "healthy",
            run(healthy_series(7), XUnit::Step),
            &[Healthy],
            &[Overfitting, Plateau, StuckAtChance, LossSpike],
        ),
        case(
            "never learns, seen on validation",
            never_learns(false, 41),
            &[StuckAtChance],
            &[Healthy],
        ),
        case("learns (control)", never_learns(true, 41), &[], &[StuckAtChance]),
        case(
            "overfitting after an early outlier",
            outlier_then_rise(0.05, 43),
            &[Overfitting],
            &[Healthy],
        ),
        case(
            "early outlier, no rise (control)",
            outlier_then_rise(0.0, 43),
            &[],
            &[Overfitting],
        ),
        case(
            "sustained rise of 6 %",
            sustained_rise(0.015, true),
            &[Overfitting],
            &[Healthy],
        ),
        case(
            "sustained rise of 1 %: validation levelling off (control)",
            sustained_rise(0.0025, true),
            &[],
            &[Overfitting],
        ),
        case(
            "flat validation (control)",
            sustained_rise(0.0, true),
            &[],
            &[Overfitting],
        ),
        case(
            "rise, training flat (control)",
            sustained_rise(0.015, false),
            &[],
            &[Overfitting],
        ),
        case(
            "lone spike in a run that clips",
            lone_spike(true, false),
            &[Healthy],
            &[],
        ),
        case(
            "lone spike, clipping unknown (control)",
            lone_spike(false, false),
            &[LossSpike],
            &[Healthy],
        ),
        case(
            "spike with a lasting rise (control)",
            lone_spike(true, true),
            &[LossSpike],
            &[Healthy],
        ),
        case(
            "a passing spike every 400 steps, clipped",
            recurring_spikes(400),
            &[Healthy],
            &[],
        ),
        case(
            "a spike every 60 steps (control)",
            recurring_spikes(60),
            &[LossSpike],
            &[Healthy],
        ),
    ]
}

#[test]
fn every_synthetic_case_is_diagnosed_as_expected() {
    let mut errors = Vec::new();
    let (mut tp, mut fp, mut fn_) = (0, 0, 0);
    for c in cases() {
        let rep = diagnose(&c.run, &DoctorConfig::default());
        let found: Vec<Label> = rep
            .findings
            .iter()
            .filter(|f| f.actionable() || f.label == Label::Healthy)
            .map(|f| f.label)
            .collect();
        for w in &c.want {
            if found.contains(w) {
                tp += 1;
            } else {
                fn_ += 1;
                errors.push(format!("{}: missing {w} (found {found:?})", c.name));
            }
        }
        for m in &c.must_not {
            if found.contains(m) {
                fp += 1;
                errors.push(format!("{}: must not report {m} (found {found:?})", c.name));
            }
        }
    }
    let precision = tp as f64 / (tp + fp).max(1) as f64;
    let recall = tp as f64 / (tp + fn_).max(1) as f64;
    println!(
        "synthetic set: {tp} required findings reported, {fn_} missed, {fp} forbidden reported: precision {precision:.2}, recall {recall:.2}"
    );
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn a_spike_settled_by_clipping_keeps_its_advice_as_information() {
    let rep = diagnose(&lone_spike(true, false), &DoctorConfig::default());
    assert_eq!(rep.verdict, "healthy");
    let spike = rep
        .findings
        .iter()
        .find(|f| f.label == Label::LossSpike)
        .expect("still listed");
    assert_eq!(spike.severity, contrai_doctor::Severity::Info);
    assert!(
        spike.recommendation.contains("clips the gradient norm at 1")
            && spike.recommendation.contains("If spikes come more often"),
        "{}",
        spike.recommendation
    );
}

#[test]
fn the_validation_rule_waits_for_the_run_before_calling_it_stuck() {
    // The first evaluations of a run that fits its training set before it generalises:
    // validation at chance so far, but a quarter of the run is no verdict on it.
    let chance = 4f64.ln();
    let mut n = Noise(47);
    let mut doctor = Doctor::new(DoctorConfig::default());
    doctor.set_hints(RunHints {
        total_steps: Some(3000),
        num_classes: Some(4),
        ..Default::default()
    });
    let mut live = Vec::new();
    for step in (10..=800).step_by(10) {
        let train = chance * (1.0 - 0.4 * step as f64 / 800.0) * (1.0 + 0.01 * n.next());
        live.extend(doctor.push(Series::TrainLoss, step, train));
        if step % 100 == 0 {
            live.extend(doctor.push(Series::ValLoss, step, chance * (1.0 + 0.01 * n.next())));
            live.extend(doctor.push(Series::ValAccuracy, step, 0.25 + 0.01 * n.next()));
        }
    }
    let labels: Vec<Label> = live.iter().map(|f| f.label).collect();
    assert!(!labels.contains(&Label::StuckAtChance), "{labels:?}");
    // The same evaluations over the whole run are a verdict.
    for step in (810..=3000).step_by(10) {
        let train = chance * 0.6 * (1.0 + 0.01 * n.next());
        live.extend(doctor.push(Series::TrainLoss, step, train));
        if step % 100 == 0 {
            live.extend(doctor.push(Series::ValLoss, step, chance * (1.0 + 0.01 * n.next())));
            live.extend(doctor.push(Series::ValAccuracy, step, 0.25 + 0.01 * n.next()));
        }
    }
    live.extend(doctor.finish());
    assert!(live.iter().any(|f| f.label == Label::StuckAtChance), "{live:?}");
}
