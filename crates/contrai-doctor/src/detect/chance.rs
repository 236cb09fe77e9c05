//! `stuck_at_chance`: the loss sits at ln K (uniform guessing) and never improves.

use super::{Ctx, finite, rel_drop};
use crate::finding::{Finding, Label, Severity};
use crate::series::Series;
use crate::stats::median;

/// Reviews the main loss.
pub fn check(ctx: &Ctx, loss: Series) -> Option<Finding> {
    let pts = finite(ctx.st.points(loss));
    if pts.len() < 10 {
        return None;
    }
    let k = (pts.len() / 5).max(2);
    let vals: Vec<f64> = pts.iter().map(|p| p.value).collect();
    let start = median(&vals[..k])?;
    let end = median(&vals[vals.len() - k..])?;
    let initial = median(&vals[..3])?;
    let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
    // Never left its initial level: no point fell clearly below the start.
    if rel_drop(start, end) > 0.02 || rel_drop(initial, min) > 0.05 || end <= 0.0 {
        return None;
    }
    let classes = match ctx.st.hints.num_classes {
        Some(c) if c >= 2 => c as f64,
        _ => end.exp().round(),
    };
    if !(2.0..=1000.0).contains(&classes) {
        return None;
    }
    let chance = classes.ln();
    let dist = (end - chance).abs() / chance;
    if dist > ctx.cfg.chance_tolerance {
        return None;
    }
    // Accuracy, when logged, must also sit near 1/K.
    let acc = finite(ctx.st.points(Series::TrainAccuracy));
    if let Some(a) = acc.last()
        && a.value > 1.5 / classes
    {
        return None;
    }
    let rec = format!(
        "the loss stays at ln {classes} = {chance:.3} (uniform guessing over {classes} classes): \
         check that labels match inputs and the loss gets logits; overfit one batch of 32 \
         first (loss must fall > 90 %), then try the LR x 0.1 and x 10"
    );
    Some(
        Finding::new(Label::StuckAtChance, Severity::Critical, pts[0].step, rec)
            .with("loss_level", end)
            .with("ln_k", chance)
            .with("classes", classes)
            .with("relative_distance", dist),
    )
}
