//! Synthetic curves for every label, each with a negative control, plus the live API.

use std::collections::BTreeMap;

use contrai_doctor::{
    Doctor, DoctorConfig, Finding, Label, Point, Run, RunHints, Series, SeriesData, XUnit, diagnose,
};
use contrai_testkit::Noise;

fn run(series: Vec<(Series, Vec<(u64, f64)>)>, unit: XUnit) -> Run {
    let mut map = BTreeMap::new();
    for (s, pts) in series {
        map.insert(
            s,
            SeriesData {
                tag: s.name().to_string(),
                points: pts
                    .into_iter()
                    .map(|(step, value)| Point { step, value })
                    .collect(),
                log: None,
            },
        );
    }
    Run {
        name: "synthetic".into(),
        source: "synthetic".into(),
        format: "synthetic".into(),
        series: map,
        hints: RunHints {
            x_unit: unit,
            ..Default::default()
        },
    }
}

fn labels(r: &Run) -> Vec<Label> {
    diagnose(r, &DoctorConfig::default())
        .findings
        .iter()
        .map(|f| f.label)
        .collect()
}

/// The overfitting finding of `r` (the test fails without one).
fn overfitting(r: &Run) -> Finding {
    let found = diagnose(r, &DoctorConfig::default()).findings;
    let said: Vec<Label> = found.iter().map(|f| f.label).collect();
    found
        .into_iter()
        .find(|f| f.label == Label::Overfitting)
        .unwrap_or_else(|| panic!("no overfitting in {said:?}"))
}

const TOTAL: u64 = 3000;

fn cosine_lr(step: u64, warmup: u64, peak: f64) -> f64 {
    if step < warmup {
        peak * (step + 1) as f64 / warmup as f64
    } else {
        let t = (step - warmup) as f64 / (TOTAL - warmup) as f64;
        0.1 * peak + 0.9 * peak * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
    }
}

/// A healthy run: decaying train/val loss, 3 % warmup + cosine, steady grad norm.
fn healthy_series(seed: u64) -> Vec<(Series, Vec<(u64, f64)>)> {
    let mut n = Noise(seed);
    let steps: Vec<u64> = (1..=TOTAL / 10).map(|i| i * 10).collect();
    let train = steps
        .iter()
        .map(|&s| {
            (
                s,
                (0.3 + 2.0 * (-(s as f64) / 600.0).exp()) * (1.0 + 0.02 * n.next()),
            )
        })
        .collect();
    let val = (1..=TOTAL / 50)
        .map(|i| i * 50)
        .map(|s| (s, 0.35 + 2.0 * (-(s as f64) / 600.0).exp()))
        .collect();
    let lr = steps.iter().map(|&s| (s, cosine_lr(s, 90, 3e-4))).collect();
    let grad = steps.iter().map(|&s| (s, 1.5 * (1.0 + 0.1 * n.next()))).collect();
    vec![
        (Series::TrainLoss, train),
        (Series::ValLoss, val),
        (Series::Lr, lr),
        (Series::GradNorm, grad),
    ]
}

fn with(
    mut base: Vec<(Series, Vec<(u64, f64)>)>,
    s: Series,
    pts: Vec<(u64, f64)>,
) -> Vec<(Series, Vec<(u64, f64)>)> {
    base.retain(|(t, _)| *t != s);
    base.push((s, pts));
    base
}

#[test]
fn healthy_run_is_healthy_only() {
    let l = labels(&run(healthy_series(7), XUnit::Step));
    assert_eq!(l, vec![Label::Healthy], "{l:?}");
}

#[test]
fn overfitting_and_control() {
    let mut n = Noise(3);
    let val: Vec<(u64, f64)> = (1..=TOTAL / 50)
        .map(|i| i * 50)
        .map(|s| {
            let x = s as f64;
            (
                s,
                0.8 + 0.5 * (-x / 300.0).exp() + 0.0002 * (x - 1000.0).max(0.0) + 0.002 * n.next(),
            )
        })
        .collect();
    let f = overfitting(&run(with(healthy_series(1), Series::ValLoss, val), XUnit::Step));
    assert!(f.evidence.contains_key("generalisation_loss_gl"));
    assert!(f.recommendation.contains("stop at step"));
    assert!(!labels(&run(healthy_series(1), XUnit::Step)).contains(&Label::Overfitting));
}

/// The smoothed curve's best is early, its lowest raw evaluation later (one low evaluation among
/// rising ones): the stop named is never before the best checkpoint named.
#[test]
fn an_overfitting_stop_is_never_before_its_best_checkpoint() {
    let val: Vec<(u64, f64)> = (1..=TOTAL / 50)
        .map(|i| i * 50)
        .map(|s| {
            let x = s as f64;
            let v = 0.8 + 0.5 * (-x / 300.0).exp() + 0.0002 * (x - 1000.0).max(0.0);
            (s, if s == 1300 { 0.7 } else { v })
        })
        .collect();
    let f = overfitting(&run(with(healthy_series(1), Series::ValLoss, val), XUnit::Step));
    assert_eq!(f.evidence["best_step"], 1300.0, "the raw best");
    assert!(f.step > 1300, "stop at {} before the best, 1300", f.step);
    assert!(
        f.recommendation.starts_with(&format!("stop at step {}:", f.step)),
        "{}",
        f.recommendation
    );
}

#[test]
fn plateau_and_control() {
    let mut n = Noise(5);
    let steps: Vec<u64> = (1..=300).map(|i| i * 10).collect();
    let flat: Vec<(u64, f64)> = steps
        .iter()
        .map(|&s| {
            (
                s,
                (1.0 + 2.0 * (-(s as f64) / 150.0).exp()) * (1.0 + 0.003 * n.next()),
            )
        })
        .collect();
    let const_lr: Vec<(u64, f64)> = steps.iter().map(|&s| (s, 1e-3)).collect();
    let base = with(healthy_series(5), Series::Lr, const_lr.clone());
    let base = base.into_iter().filter(|(s, _)| *s != Series::ValLoss).collect();
    let l = labels(&run(with(base, Series::TrainLoss, flat), XUnit::Step));
    assert!(l.contains(&Label::Plateau), "{l:?}");
    // Control: same constant LR, loss still falling steadily.
    let falling: Vec<(u64, f64)> = steps.iter().map(|&s| (s, 3.0 - 0.0008 * s as f64)).collect();
    let c = run(
        vec![(Series::TrainLoss, falling), (Series::Lr, const_lr)],
        XUnit::Step,
    );
    assert!(!labels(&c).contains(&Label::Plateau));
}

#[test]
fn oscillation_and_control() {
    let swing: Vec<(u64, f64)> = (0..60)
        .map(|e| (e, if e % 2 == 0 { 1.15 } else { 0.85 }))
        .collect();
    let l = labels(&run(vec![(Series::TrainLoss, swing)], XUnit::Epoch));
    assert!(l.contains(&Label::Oscillation), "{l:?}");
    let smooth: Vec<(u64, f64)> = (0..60).map(|e| (e, 0.2 + (-(e as f64) / 10.0).exp())).collect();
    let l = labels(&run(vec![(Series::TrainLoss, smooth)], XUnit::Epoch));
    assert!(!l.contains(&Label::Oscillation), "{l:?}");
}

#[test]
fn stuck_at_chance_and_control() {
    let mut n = Noise(11);
    let stuck: Vec<(u64, f64)> = (1..=100)
        .map(|i| (i * 10, 10f64.ln() * (1.0 + 0.002 * n.next())))
        .collect();
    // A bare loss at ln 10 is a chance level only for a run known to classify 10 classes.
    let mut r = run(vec![(Series::TrainLoss, stuck.clone())], XUnit::Step);
    assert!(
        !labels(&r).contains(&Label::StuckAtChance),
        "no class count, no accuracy: no guess"
    );
    r.hints.num_classes = Some(10);
    let l = labels(&r);
    assert!(l.contains(&Label::StuckAtChance), "{l:?}");
    r.hints.task = contrai_doctor::Task::LanguageModel;
    r.hints.num_classes = None;
    assert!(
        !labels(&r).contains(&Label::StuckAtChance),
        "a language model's loss has no chance level"
    );
    let learning: Vec<(u64, f64)> = (1..=100)
        .map(|i| (i * 10, 0.3 + (10f64.ln() - 0.3) * (-(i as f64) / 20.0).exp()))
        .collect();
    let l = labels(&run(vec![(Series::TrainLoss, learning)], XUnit::Step));
    assert!(!l.contains(&Label::StuckAtChance), "{l:?}");
}

#[test]
fn loss_spike_and_control() {
    let base = healthy_series(13);
    let train: Vec<(u64, f64)> = base[0]
        .1
        .iter()
        .map(|&(s, v)| (s, if s == 1500 { v * 3.0 } else { v }))
        .collect();
    let l = labels(&run(with(base.clone(), Series::TrainLoss, train), XUnit::Step));
    assert!(l.contains(&Label::LossSpike), "{l:?}");
    assert!(!labels(&run(base, XUnit::Step)).contains(&Label::LossSpike));
}

/// Per-batch losses of a small batch at a low loss: mostly ~0.01, now and then one hard sample
/// lifts a batch ~10x. Heavy-tailed noise that revisits its highs is not a spike.
#[test]
fn heavy_tailed_batch_noise_at_a_low_loss_is_not_a_spike() {
    let mut n = Noise(29);
    let base = healthy_series(29);
    let train: Vec<(u64, f64)> = base[0]
        .1
        .iter()
        .enumerate()
        .map(|(i, &(s, v))| {
            if s < 1000 {
                return (s, v);
            }
            let low = 0.012 * (1.0 + 0.4 * n.next());
            (s, if i % 17 == 0 { low * 10.0 } else { low })
        })
        .collect();
    let r = diagnose(
        &run(with(base, Series::TrainLoss, train), XUnit::Step),
        &DoctorConfig::default(),
    );
    assert!(
        !r.findings.iter().any(|f| f.label == Label::LossSpike),
        "{:?}",
        r.findings
    );
}

#[test]
fn nonfinite_and_control() {
    let base = healthy_series(17);
    let train: Vec<(u64, f64)> = base[0]
        .1
        .iter()
        .map(|&(s, v)| (s, if s >= 2000 { f64::NAN } else { v }))
        .collect();
    let rep = diagnose(
        &run(with(base.clone(), Series::TrainLoss, train), XUnit::Step),
        &DoctorConfig::default(),
    );
    let f = rep.findings.iter().find(|f| f.label == Label::Nonfinite);
    assert_eq!(f.map(|f| f.step), Some(2000), "{:?}", rep.findings);
    assert!(rep.findings.iter().all(|f| f.label != Label::Healthy));
    assert!(!labels(&run(base, XUnit::Step)).contains(&Label::Nonfinite));
}

#[test]
fn grad_explode_and_control() {
    let base = healthy_series(19);
    let scaled = |k: f64, at: u64| -> Vec<(u64, f64)> {
        base[3]
            .1
            .iter()
            .map(|&(s, v)| (s, if s == at { v * k } else { v }))
            .collect()
    };
    // Two orders of magnitude in one step.
    let l = labels(&run(
        with(base.clone(), Series::GradNorm, scaled(150.0, 1200)),
        XUnit::Step,
    ));
    assert!(l.contains(&Label::GradExplode), "{l:?}");
    // An order of magnitude with the loss jumping at the same step.
    let loss: Vec<(u64, f64)> = base[0]
        .1
        .iter()
        .map(|&(s, v)| (s, if s == 1200 { v * 3.0 } else { v }))
        .collect();
    let both = with(
        with(base.clone(), Series::GradNorm, scaled(20.0, 1200)),
        Series::TrainLoss,
        loss,
    );
    let l = labels(&run(both, XUnit::Step));
    assert!(l.contains(&Label::GradExplode), "{l:?}");
    // Sustained growth.
    let grow: Vec<(u64, f64)> = base[3]
        .1
        .iter()
        .map(|&(s, v)| (s, if s > 2000 { v * 30.0 } else { v }))
        .collect();
    let l = labels(&run(with(base.clone(), Series::GradNorm, grow), XUnit::Step));
    assert!(l.contains(&Label::GradExplode), "{l:?}");
    // Controls: an isolated 14x spike that clipping absorbs, and the healthy run.
    let l = labels(&run(
        with(base.clone(), Series::GradNorm, scaled(14.0, 1200)),
        XUnit::Step,
    ));
    assert!(!l.contains(&Label::GradExplode), "{l:?}");
    assert!(!labels(&run(base, XUnit::Step)).contains(&Label::GradExplode));
}

#[test]
fn grad_vanish_and_control() {
    let base = healthy_series(23);
    let vanish: Vec<(u64, f64)> = base[3]
        .1
        .iter()
        .map(|&(s, v)| (s, v * (-(s as f64) / 200.0).exp()))
        .collect();
    // The gradient gone 1000x by step 1400, the loss stops there.
    let stalled: Vec<(u64, f64)> = base[0]
        .1
        .iter()
        .map(|&(s, v)| {
            (
                s,
                if s > 1400 {
                    v / (0.3 + 2.0 * (-(s as f64) / 600.0).exp()) * 0.49
                } else {
                    v
                },
            )
        })
        .collect();
    let both = with(
        with(base.clone(), Series::GradNorm, vanish.clone()),
        Series::TrainLoss,
        stalled,
    );
    let l = labels(&run(both, XUnit::Step));
    assert!(l.contains(&Label::GradVanish), "{l:?}");
    // A loss that still falls under the small norm is learning: the gradient carries it.
    let l = labels(&run(with(base.clone(), Series::GradNorm, vanish), XUnit::Step));
    assert!(!l.contains(&Label::GradVanish), "{l:?}");
    let mild: Vec<(u64, f64)> = base[3]
        .1
        .iter()
        .map(|&(s, v)| (s, v * (1.0 - 0.7 * s as f64 / TOTAL as f64)))
        .collect();
    let l = labels(&run(with(base, Series::GradNorm, mild), XUnit::Step));
    assert!(!l.contains(&Label::GradVanish), "{l:?}");
}

fn lr_run(warmup: u64, decay: bool) -> Run {
    let pts: Vec<(u64, f64)> = (0..TOTAL / 10)
        .map(|i| i * 10)
        .map(|s| {
            let v = cosine_lr(s, warmup, 1e-3);
            let v = if !decay && s >= warmup { 1e-3 } else { v };
            (s, v)
        })
        .collect();
    run(with(healthy_series(29), Series::Lr, pts), XUnit::Step)
}

#[test]
fn warmup_too_long_and_control() {
    assert!(labels(&lr_run(900, true)).contains(&Label::LrWarmupTooLong));
    assert!(!labels(&lr_run(90, true)).contains(&Label::LrWarmupTooLong));
}

#[test]
fn warmup_too_short_and_control() {
    assert!(labels(&lr_run(10, true)).contains(&Label::LrWarmupTooShort));
    assert!(!labels(&lr_run(90, true)).contains(&Label::LrWarmupTooShort));
}

#[test]
fn lr_no_decay_and_control() {
    let l = labels(&lr_run(90, false));
    assert!(l.contains(&Label::LrNoDecay), "{l:?}");
    assert!(!labels(&lr_run(90, true)).contains(&Label::LrNoDecay));
}

#[test]
fn live_feeding_matches_offline_and_emits_once() {
    let base = healthy_series(31);
    let train: Vec<(u64, f64)> = base[0]
        .1
        .iter()
        .map(|&(s, v)| (s, if s >= 2500 { f64::INFINITY } else { v }))
        .collect();
    let r = run(with(base, Series::TrainLoss, train), XUnit::Step);
    let mut all: Vec<(Series, Point)> = r
        .series
        .iter()
        .flat_map(|(s, d)| d.points.iter().map(move |p| (*s, *p)))
        .collect();
    all.sort_by_key(|(s, p)| (p.step, *s));
    let mut doctor = Doctor::new(DoctorConfig::default());
    let mut emitted = Vec::new();
    for (s, p) in all {
        emitted.extend(doctor.push(s, p.step, p.value));
    }
    // The non-finite loss is reported live, at the step it happened, exactly once.
    let nf: Vec<_> = emitted.iter().filter(|f| f.label == Label::Nonfinite).collect();
    assert_eq!(nf.len(), 1);
    assert_eq!(nf[0].step, 2500);
    emitted.extend(doctor.finish());
    let mut live: Vec<Label> = doctor.findings().iter().map(|f| f.label).collect();
    let mut offline = labels(&r);
    live.sort();
    offline.sort();
    assert_eq!(live, offline);
    assert!(doctor.finish().is_empty());
}

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
/// four epochs, 1 % in all (`rising`; else it wobbles flat), while the training loss falls by a
/// third after the best (`train_falls`; else it stays flat).
fn small_sustained_rise(rising: bool, train_falls: bool) -> Run {
    let val: Vec<(u64, f64)> = (0..13)
        .map(|e| {
            let v = if e <= 8 {
                0.5 + 0.5 * (-(e as f64) / 2.0).exp()
            } else if rising {
                (0.5 + 0.5 * (-8.0f64 / 2.0).exp()) * (1.0 + 0.0025 * (e - 8) as f64)
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
            "small sustained rise",
            small_sustained_rise(true, true),
            &[Overfitting],
            &[Healthy],
        ),
        case(
            "flat validation (control)",
            small_sustained_rise(false, true),
            &[],
            &[Overfitting],
        ),
        case(
            "rise, training flat (control)",
            small_sustained_rise(true, false),
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
