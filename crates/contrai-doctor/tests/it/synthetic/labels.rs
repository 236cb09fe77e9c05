//! Each label on a synthetic curve with its negative control, and the live doctor fed point by
//! point.

use super::*;

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
    // The norm down 2000x by step 1500 while the loss fell to a floor 20,000x under its start
    // and stays there: the norm shrank with the loss (a model that fits its data), not while
    // the loss was still high.
    let shrank: Vec<(u64, f64)> = base[3]
        .1
        .iter()
        .map(|&(s, v)| (s, v * (-(s as f64) / 200.0).exp().max(5e-4)))
        .collect();
    let floor: Vec<(u64, f64)> = base[0]
        .1
        .iter()
        .map(|&(s, _)| (s, 2.3 * (-(s as f64) / 100.0).exp() + 1e-4))
        .collect();
    let converged = with(
        with(base.clone(), Series::GradNorm, shrank),
        Series::TrainLoss,
        floor,
    );
    let l = labels(&run(converged, XUnit::Step));
    assert!(!l.contains(&Label::GradVanish), "{l:?}");
    let mild: Vec<(u64, f64)> = base[3]
        .1
        .iter()
        .map(|&(s, v)| (s, v * (1.0 - 0.7 * s as f64 / TOTAL as f64)))
        .collect();
    let l = labels(&run(with(base, Series::GradNorm, mild), XUnit::Step));
    assert!(!l.contains(&Label::GradVanish), "{l:?}");
}

/// The healthy run's series with an LR warmed up over `warmup` steps, then decayed or held.
fn lr_series(warmup: u64, decay: bool) -> Vec<(Series, Vec<(u64, f64)>)> {
    let pts: Vec<(u64, f64)> = (0..TOTAL / 10)
        .map(|i| i * 10)
        .map(|s| {
            let v = cosine_lr(s, warmup, 1e-3);
            let v = if !decay && s >= warmup { 1e-3 } else { v };
            (s, v)
        })
        .collect();
    with(healthy_series(29), Series::Lr, pts)
}

fn lr_run(warmup: u64, decay: bool) -> Run {
    run(lr_series(warmup, decay), XUnit::Step)
}

#[test]
fn warmup_too_long_and_control() {
    assert!(labels(&lr_run(900, true)).contains(&Label::LrWarmupTooLong));
    assert!(!labels(&lr_run(90, true)).contains(&Label::LrWarmupTooLong));
}

/// A 10-step warmup whose loss doubles over steps 50-150: the peak LR hit an untrained model.
fn short_warmup_that_hurt() -> Run {
    let mut series = lr_series(10, true);
    for (_, pts) in series.iter_mut().filter(|(s, _)| *s == Series::TrainLoss) {
        for (_, v) in pts.iter_mut().filter(|(step, _)| (50..=150).contains(step)) {
            *v *= 2.0;
        }
    }
    run(series, XUnit::Step)
}

#[test]
fn warmup_too_short_and_control() {
    assert!(labels(&short_warmup_that_hurt()).contains(&Label::LrWarmupTooShort));
    assert!(!labels(&lr_run(90, true)).contains(&Label::LrWarmupTooShort));
    // As short a warmup, the loss unharmed: no finding (the label is a warmup too short
    // where it hurts; a labelled LoRA run with a 0.24 % warmup and a falling loss showed it).
    assert!(!labels(&lr_run(10, true)).contains(&Label::LrWarmupTooShort));
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
