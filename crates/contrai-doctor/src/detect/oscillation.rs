//! `oscillation`: the loss swings up and down from log to log with no net progress.

use super::{Ctx, finite};
use crate::finding::{Finding, Label, Severity};
use crate::stats::{block_medians, median};

/// Swing statistics of a loss series after its first fifth: (amplitude, sign-change share,
/// net drift share, start step).
fn swings(points: &[crate::series::Point]) -> Option<(f64, f64, f64, u64)> {
    let pts = finite(points);
    if pts.len() < 10 {
        return None;
    }
    let skip = pts.len() / 5;
    let tail = &pts[skip..];
    let positive = tail.iter().all(|p| p.value > 0.0);
    let ys: Vec<f64> = tail
        .iter()
        .map(|p| if positive { p.value.ln() } else { p.value })
        .collect();
    // Per-batch noise of long logs averages out over blocks; true swings survive.
    let ys = block_medians(&ys, 60);
    if ys.len() < 8 {
        return None;
    }
    let d: Vec<f64> = ys.windows(2).map(|w| w[1] - w[0]).collect();
    let scale = if positive {
        1.0
    } else {
        median(&ys)?.abs().max(1e-12)
    };
    let abs: Vec<f64> = d.iter().map(|x| x.abs() / scale).collect();
    let amp = median(&abs)?;
    let nz: Vec<f64> = d.iter().copied().filter(|x| *x != 0.0).collect();
    let changes = nz.windows(2).filter(|w| w[0].signum() != w[1].signum()).count();
    let share = if nz.len() > 1 {
        changes as f64 / (nz.len() - 1) as f64
    } else {
        0.0
    };
    let total: f64 = d.iter().map(|x| x.abs()).sum();
    let drift = if total > 0.0 {
        d.iter().sum::<f64>().abs() / total
    } else {
        1.0
    };
    // Net progress over the tail: Theil-Sen change and its standard error.
    let coarse = block_medians(&ys, 32);
    let xs: Vec<f64> = (0..coarse.len()).map(|i| i as f64).collect();
    let slope = crate::stats::theil_sen(&xs, &coarse)?;
    let resid: Vec<f64> = xs.iter().zip(&coarse).map(|(x, y)| y - slope * x).collect();
    let centre = median(&resid)?;
    let sigma = 1.4826 * crate::stats::mad(&resid, centre) / scale;
    let progress = -slope * (coarse.len() - 1) as f64 / scale;
    let se = sigma * (12.0 / coarse.len() as f64).sqrt();
    let significant = progress > 2.0 * se && progress > 0.05;
    Some((amp, share, if significant { 1.0 } else { drift }, tail[0].step))
}

/// Reviews the training loss (the validation loss only when no training loss is logged: eval
/// noise from a small validation set is not an optimisation problem).
pub fn check(ctx: &Ctx) -> Option<Finding> {
    let s = super::main_loss(ctx.st);
    let (amp, share, drift, start) = swings(ctx.st.points(s))?;
    if amp < ctx.cfg.oscillation_amplitude || share < 0.4 || drift >= 0.3 {
        return None;
    }
    // Under an annealing LR, a noisy flat tail is convergence, not an unstable optimiser.
    if super::plateau::lr_annealing(ctx, start) {
        return None;
    }
    let rec = format!(
        "{} swings {:.0} % from log to log with no net progress: lower the peak LR x 0.3, raise \
         the effective batch to 32-64 (accumulate gradients), clip the gradient norm at 1.0; a \
         dataset with duplicates or wrong labels gives the same picture, so audit it",
        s.name(),
        100.0 * amp
    );
    Some(
        Finding::new(Label::Oscillation, Severity::Warning, start, rec)
            .with("median_swing", amp)
            .with("sign_change_share", share)
            .with("net_drift_share", drift),
    )
}
