//! `grad_vanish`: the gradient norm collapsed by orders of magnitude from its peak.

use super::{Ctx, finite, num};
use crate::finding::{Finding, Label, Severity};
use crate::series::Series;
use crate::stats::{block_medians, median};

/// Reviews the gradient norm.
pub fn vanish(ctx: &Ctx) -> Option<Finding> {
    // A norm of exactly 0 is a step with no gradient at all (a batch whose labels were all
    // masked, an RL group whose rewards were all equal), not one that shrank: the level is the
    // steps' that had one.
    let pts: Vec<_> = finite(ctx.st.points(Series::GradNorm))
        .into_iter()
        .filter(|p| p.value != 0.0)
        .collect();
    if pts.len() < 10 {
        return None;
    }
    let vals: Vec<f64> = pts.iter().map(|p| p.value).collect();
    let (peak, last) = peak_and_last(&vals)?;
    if peak <= 0.0 || last > peak * ctx.cfg.grad_vanish_ratio || loss_fell_as_far(ctx, peak / last) {
        return None;
    }
    let step = pts
        .iter()
        .find(|p| p.value <= peak * ctx.cfg.grad_vanish_ratio)
        .map(|p| p.step)
        .unwrap_or(pts[0].step);
    if still_learns(ctx, step) {
        return None;
    }
    let rec = format!(
        "gradient norm fell from {} to {} ({:.1e}x): check for dead activations or saturated \
         outputs, use pre-LN/residual paths, raise the LR x 3 if it was annealed too early, and \
         use bf16 rather than fp16 (underflow)",
        num(peak),
        num(last),
        last / peak
    );
    Some(
        Finding::new(Label::GradVanish, Severity::Warning, step, rec)
            .with("peak_grad_norm", peak)
            .with("last_grad_norm", last)
            .with("ratio", last / peak),
    )
}

/// A series' peak (the highest of 20 block medians) and its level at the end (the median of
/// its last tenth, at least 3 points).
fn peak_and_last(vals: &[f64]) -> Option<(f64, f64)> {
    let peak = block_medians(vals, 20).into_iter().fold(0.0, f64::max);
    let k = (vals.len() / 10).max(3).min(vals.len());
    Some((peak, median(&vals[vals.len() - k..])?))
}

/// True when the main loss fell from its peak to its end by `fall` or more: a gradient norm
/// that shrank with the loss (a cross-entropy's gradient shrinks as its loss, a squared
/// error's as its root) followed a model that converged, not a gradient that vanished while
/// the loss was still high.
fn loss_fell_as_far(ctx: &Ctx, fall: f64) -> bool {
    let loss: Vec<f64> = finite(ctx.st.points(super::main_loss(ctx.st)))
        .iter()
        .map(|p| p.value)
        .collect();
    peak_and_last(&loss).is_some_and(|(peak, last)| last > 0.0 && peak / last >= fall)
}

/// The least a loss must fall (relative, beyond twice its standard error) after the gradient
/// norm fell for the gradients to be carrying what the model learns.
const STILL_LEARNS: f64 = 0.01;

/// True when the main loss kept falling beyond its noise from `from` on: a small gradient norm
/// that still moves the loss is a fine-tune's or a converging run's, not a vanished gradient
/// (which stops learning).
fn still_learns(ctx: &Ctx, from: u64) -> bool {
    let loss = finite(ctx.st.points(super::main_loss(ctx.st)));
    let since: Vec<_> = loss.iter().filter(|p| p.step >= from && p.value > 0.0).collect();
    since.len() >= 8
        && super::fitted_change(since.iter().copied(), f64::ln).is_some_and(|(change, se)| {
            let fall = 1.0 - change.exp();
            fall >= STILL_LEARNS && fall > 2.0 * se
        })
}

/// A sustained rise of the gradient norm: the latest tenth sits an order of magnitude above the
/// run's typical level (median of its first half, after warmup).
pub fn growth(ctx: &Ctx) -> Option<Finding> {
    let pts = finite(ctx.st.points(Series::GradNorm));
    if pts.len() < 20 {
        return None;
    }
    let vals: Vec<f64> = pts.iter().map(|p| p.value).collect();
    let k = (vals.len() / 10).max(3);
    let base = median(&vals[vals.len() / 10..vals.len() / 2])?;
    let last = median(&vals[vals.len() - k..])?;
    if base <= 0.0 || last < ctx.cfg.grad_explode_ratio * base {
        return None;
    }
    let step = pts
        .iter()
        .skip(vals.len() / 2)
        .find(|p| p.value >= ctx.cfg.grad_explode_ratio * base)
        .map(|p| p.step)
        .unwrap_or(pts[pts.len() - k].step);
    let rec = format!(
        "gradient norm grew from {} to {} ({:.0}x) and stays there: clip the global gradient \
         norm at {}, lower the peak LR x 0.5, and use bf16 instead of fp16",
        num(base),
        num(last),
        last / base,
        num(2.0 * base)
    );
    Some(
        Finding::new(Label::GradExplode, Severity::Critical, step, rec)
            .with("typical_grad_norm", base)
            .with("last_grad_norm", last)
            .with("ratio", last / base),
    )
}
