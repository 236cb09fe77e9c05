//! `plateau`: the smoothed loss improved by less than a small fraction over the recent part of
//! the run while the learning rate was not being annealed.

use super::{Ctx, finite, num};
use crate::finding::{Finding, Label, Severity};
use crate::series::Series;
use crate::stats::{block_medians, median, theil_sen};

/// Relative change over the recent window, its standard error, the window's first step and its
/// point count.
pub(crate) fn recent_change(ctx: &Ctx, loss: Series) -> Option<(f64, f64, u64, usize)> {
    let pts = finite(ctx.st.points(loss));
    if pts.len() < 10 {
        return None;
    }
    let w = ((pts.len() as f64) * ctx.cfg.plateau_window).ceil() as usize;
    let w = w.clamp(4, pts.len());
    let win = &pts[pts.len() - w..];
    let positive = win.iter().all(|p| p.value > 0.0);
    let ys: Vec<f64> = win
        .iter()
        .map(|p| if positive { p.value.ln() } else { p.value })
        .collect();
    let xs: Vec<f64> = win.iter().map(|p| p.step as f64).collect();
    // 32 block medians keep Theil-Sen at <= 496 pairs whatever the log's length.
    let ys = block_medians(&ys, 32);
    let xs = block_medians(&xs, 32);
    let slope = theil_sen(&xs, &ys)?;
    // The change over the recent window (the last 40 % of the run seen so far).
    let span = xs.last()? - xs.first()?;
    // A plateau must last at least the patience (300 steps, or 3 epochs).
    let patience = match ctx.st.hints.x_unit {
        crate::series::XUnit::Epoch => ctx.cfg.patience_evals as f64,
        crate::series::XUnit::Step => ctx.cfg.patience_steps,
    };
    if span < patience {
        return None;
    }
    let change = slope * span;
    // Noise: robust sigma of the residuals around the Theil-Sen line; the standard error of the
    // change over the window is sigma * sqrt(12 / m).
    let x0 = xs[0];
    let resid: Vec<f64> = xs.iter().zip(&ys).map(|(x, y)| y - slope * (x - x0)).collect();
    let centre = median(&resid)?;
    let sigma = 1.4826 * crate::stats::mad(&resid, centre);
    let level = if positive {
        1.0
    } else {
        median(&ys)?.abs().max(1e-12)
    };
    let se = sigma / level * (12.0 / ys.len() as f64).sqrt();
    let rel = if positive {
        change.exp() - 1.0
    } else {
        change / level
    };
    Some((rel, se, win[0].step, w))
}

/// True when the LR is being annealed over the steps from `from`: a falling schedule explains a
/// flattening loss (convergence), so it is not a plateau to act on.
pub(crate) fn lr_annealing(ctx: &Ctx, from: u64) -> bool {
    let lr: Vec<f64> = ctx
        .st
        .points(Series::Lr)
        .iter()
        .filter(|p| p.step >= from && p.value.is_finite())
        .map(|p| p.value)
        .collect();
    let peak = ctx
        .st
        .points(Series::Lr)
        .iter()
        .map(|p| p.value)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (lo, hi) = lr
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    peak > 0.0 && !lr.is_empty() && lo < 0.9 * hi
}

/// Reviews the main loss.
pub fn check(ctx: &Ctx, loss: Series) -> Option<Finding> {
    let (rel, se, start, w) = recent_change(ctx, loss)?;
    // Improvement is a negative change. A plateau: the improvement is tiny, or not
    // distinguishable from the curve's own noise (under two standard errors).
    let improvement = -rel;
    // The noise test needs enough points to estimate the noise (8).
    // Only a small improvement (under 10x the threshold) can be called noise.
    let noisy = w >= 8 && improvement < 2.0 * se && improvement < 10.0 * ctx.cfg.plateau_rel;
    if improvement >= ctx.cfg.plateau_rel && !noisy {
        return None;
    }
    if lr_annealing(ctx, start) {
        return None;
    }
    let last = ctx.st.points(loss).last()?.step;
    let lr_part = if let Some(peak_lr) = ctx.peak_lr() {
        format!(
            "decay the LR (cosine to {} = 0.1x peak) or cut it x 0.3 now (to {})",
            num(peak_lr * 0.1),
            num(peak_lr * 0.3)
        )
    } else {
        "cut the LR x 0.3 (or ReduceLROnPlateau factor 0.3, patience 3 evals) and decay it \
         (cosine with 3 % warmup)"
            .to_string()
    };
    let rec = format!(
        "{} improved only {:.2} % (standard error {:.2} %) over the last {} logs (steps \
         {}-{}): {lr_part}; audit the data for duplicates and label noise before tuning further; \
         effective batch 16-64",
        loss.name(),
        100.0 * improvement,
        100.0 * se,
        w,
        start,
        last
    );
    Some(
        Finding::new(Label::Plateau, Severity::Warning, start, rec)
            .with("recent_improvement", improvement)
            .with("improvement_standard_error", se)
            .with("window_points", w as f64)
            .with("window_start_step", start as f64)
            .with("window_end_step", last as f64),
    )
}
