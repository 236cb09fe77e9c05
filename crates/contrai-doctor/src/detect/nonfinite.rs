//! `nonfinite`: NaN or infinite loss or gradient norm.

use super::{Ctx, num};
use crate::finding::{Finding, Label, Severity};
use crate::series::Series;

/// Fires on the first non-finite loss or gradient-norm value.
pub fn check(ctx: &Ctx, series: Series) -> Option<Finding> {
    if !matches!(series, Series::TrainLoss | Series::ValLoss | Series::GradNorm) {
        return None;
    }
    let pts = ctx.st.points(series);
    let last = pts.last()?;
    if last.value.is_finite() {
        return None;
    }
    let prev = pts.iter().rev().find(|p| p.value.is_finite());
    let mut rec = format!(
        "{} became {} at step {}: train in bf16 (or f32) instead of fp16, clip the global \
         gradient norm at 1.0",
        series.name(),
        last.value,
        last.step
    );
    if let Some(peak_lr) = ctx.peak_lr() {
        rec.push_str(&format!(", lower the peak LR x 0.5 (to {})", num(peak_lr * 0.5)));
    } else {
        rec.push_str(", lower the peak LR x 0.5");
    }
    if let Some(p) = prev {
        rec.push_str(&format!(
            ", and resume from the last checkpoint before step {}",
            last.step
        ));
        let _ = p;
    }
    let mut f = Finding::new(Label::Nonfinite, Severity::Critical, last.step, rec)
        .with("first_nonfinite_step", last.step as f64);
    if let Some(p) = prev {
        f = f
            .with("last_finite_step", p.step as f64)
            .with("last_finite_value", p.value);
    }
    Some(f)
}

/// End-of-run summary: where the first non-finite value was and how many there are per series.
pub fn summary(ctx: &Ctx) -> Option<Finding> {
    let mut first: Option<(Series, u64)> = None;
    let mut counts = Vec::new();
    for s in [Series::TrainLoss, Series::ValLoss, Series::GradNorm] {
        let pts = ctx.st.points(s);
        let bad: Vec<u64> = pts
            .iter()
            .filter(|p| !p.value.is_finite())
            .map(|p| p.step)
            .collect();
        if let Some(&step) = bad.first() {
            if first.is_none_or(|(_, f)| step < f) {
                first = Some((s, step));
            }
            counts.push((s, bad.len(), pts.len()));
        }
    }
    let (series, step) = first?;
    let pts = ctx.st.points(series);
    let prev = pts.iter().take_while(|p| p.value.is_finite()).last().copied();
    let mut rec = format!(
        "{} first became non-finite at step {step}: train in bf16 (or f32) instead of fp16, \
         clip the global gradient norm at 1.0, lower the peak LR x 0.5",
        series.name()
    );
    rec.push_str(&format!(
        ", and resume from the last checkpoint before step {step}"
    ));
    let mut f = Finding::new(Label::Nonfinite, Severity::Critical, step, rec)
        .with("first_nonfinite_step", step as f64);
    for (s, n, total) in counts {
        f = f
            .with(&format!("{}_nonfinite_points", s.name()), n as f64)
            .with(&format!("{}_points", s.name()), total as f64);
    }
    if let Some(p) = prev {
        f = f
            .with("last_finite_step", p.step as f64)
            .with("last_finite_value", p.value);
    }
    Some(f)
}
