//! Synthetic curves for every label, each with a negative control (`labels`), a table of harder
//! synthetic cases (`cases`), and the live API.

use std::collections::BTreeMap;

use contrai_doctor::{
    Doctor, DoctorConfig, Finding, Label, Point, Run, RunHints, Series, SeriesData, XUnit, diagnose,
};
use contrai_testkit::Noise;

mod cases;
mod labels;

pub(super) fn run(series: Vec<(Series, Vec<(u64, f64)>)>, unit: XUnit) -> Run {
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
        parts: Vec::new(),
    }
}

pub(super) fn labels(r: &Run) -> Vec<Label> {
    diagnose(r, &DoctorConfig::default())
        .findings
        .iter()
        .map(|f| f.label)
        .collect()
}

/// The overfitting finding of `r` (the test fails without one).
pub(super) fn overfitting(r: &Run) -> Finding {
    let found = diagnose(r, &DoctorConfig::default()).findings;
    let said: Vec<Label> = found.iter().map(|f| f.label).collect();
    found
        .into_iter()
        .find(|f| f.label == Label::Overfitting)
        .unwrap_or_else(|| panic!("no overfitting in {said:?}"))
}

const TOTAL: u64 = 3000;

pub(super) fn cosine_lr(step: u64, warmup: u64, peak: f64) -> f64 {
    if step < warmup {
        peak * (step + 1) as f64 / warmup as f64
    } else {
        let t = (step - warmup) as f64 / (TOTAL - warmup) as f64;
        0.1 * peak + 0.9 * peak * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
    }
}

/// A healthy run: decaying train/val loss, 3 % warmup + cosine, steady grad norm.
pub(super) fn healthy_series(seed: u64) -> Vec<(Series, Vec<(u64, f64)>)> {
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

pub(super) fn with(
    mut base: Vec<(Series, Vec<(u64, f64)>)>,
    s: Series,
    pts: Vec<(u64, f64)>,
) -> Vec<(Series, Vec<(u64, f64)>)> {
    base.retain(|(t, _)| *t != s);
    base.push((s, pts));
    base
}
