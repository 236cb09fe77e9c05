//! `oscillation`: the loss swings up and down from log to log with no net progress — the
//! training loss (per-batch noise averaged out), or the validation loss swinging by much more
//! than an evaluation's own noise while it neither falls nor rises.

use super::{Ctx, finite};
use crate::finding::{Finding, Label, Severity};
use crate::series::{Series, XUnit};
use crate::stats::{block_medians, median};

/// A validation loss swings when its median eval-to-eval change is this share of its level:
/// an evaluation averages a whole set, so swings this large are not sampling noise.
pub(crate) const VAL_AMPLITUDE: f64 = 0.10;

/// Swing statistics of a loss series after its first fifth.
struct Swings {
    /// Median relative change from one (block of) log(s) to the next.
    amp: f64,
    /// Share of consecutive changes that reverse direction.
    share: f64,
    /// Net change over total path (1 when the series significantly fell).
    drift: f64,
    /// The series rose by more than its noise over the tail.
    rose: bool,
    /// The tail's first step.
    start: u64,
}

/// `blocks`: how many block medians a long series is read as (per-batch noise averages out
/// over blocks; true swings survive); an evaluation series is read point by point.
fn swings(points: &[crate::series::Point], blocks: usize) -> Option<Swings> {
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
    let ys = block_medians(&ys, blocks);
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
    let (change, se) = crate::stats::theil_sen_change(&xs, &coarse)?;
    let (progress, se) = (-change / scale, se / scale);
    let significant = progress > 2.0 * se && progress > 0.05;
    Some(Swings {
        amp,
        share,
        drift: if significant { 1.0 } else { drift },
        rose: -progress > 2.0 * se && -progress > 0.05,
        start: tail[0].step,
    })
}

/// Evaluations that stand this factor above (or below) both neighbours are swings...
const ZIGZAG_FACTOR: f64 = 1.25;
/// ...and a validation loss oscillates, whatever its trend, when this share of its
/// evaluations (at least [`ZIGZAG_MIN`]) are.
const ZIGZAG_SHARE: f64 = 0.15;
/// The fewest such evaluations that make a pattern.
const ZIGZAG_MIN: usize = 3;

/// Evaluations that stand [`ZIGZAG_FACTOR`] above or below both neighbours: how many, and
/// the first one's step.
fn zigzags(points: &[crate::series::Point]) -> (usize, u64) {
    let pts: Vec<_> = finite(points).into_iter().filter(|p| p.value > 0.0).collect();
    let r = ZIGZAG_FACTOR.ln();
    let mut first = None;
    let mut n = 0;
    for w in pts.windows(3) {
        let [a, b, c] = [w[0].value.ln(), w[1].value.ln(), w[2].value.ln()];
        if (b - a >= r && b - c >= r) || (a - b >= r && c - b >= r) {
            n += 1;
            first.get_or_insert(w[1].step);
        }
    }
    (n, first.unwrap_or(0))
}

/// Reviews the training loss, unless it is logged by the step and on a plateau (a loss with no
/// net progress stalls; its log-to-log swings are the noise of single batches on the stalled
/// level — whole epochs' means that swing do oscillate); then the validation loss, unless it is
/// overfitting (a noisy rise is that finding, not this one).
pub fn check(ctx: &Ctx, overfitting: bool, plateau: bool) -> Option<Finding> {
    let s = super::main_loss(ctx.st);
    if s == Series::ValLoss {
        return validation(ctx);
    }
    let batch_noise = plateau && ctx.st.hints.x_unit == XUnit::Step;
    let train = (!batch_noise)
        .then(|| swings(ctx.st.points(s), 60))
        .flatten()
        .filter(|w| {
            w.amp >= ctx.cfg.oscillation_amplitude && w.share >= 0.4 && w.drift < 0.3
            // Under an annealing LR, a noisy flat tail is convergence, not an unstable optimiser.
            && !super::plateau::lr_annealing(ctx, w.start)
            // A model whose validation still improves learns: its training loss's swings are
            // the noise of single batches.
            && !validation_improving(ctx)
        });
    match train {
        Some(w) => Some(finding(s, &w)),
        None if overfitting => None,
        None => validation(ctx),
    }
}

/// Evaluations a validation loss needs to tell that it still improves.
const IMPROVING_EVALS: usize = 4;

/// The validation loss, evaluated [`IMPROVING_EVALS`] times or more, falls along its fitted
/// (Theil-Sen) line by more than twice that fall's standard error: the model still generalises
/// better, whatever one lucky evaluation says.
fn validation_improving(ctx: &Ctx) -> bool {
    let val = finite(ctx.st.points(Series::ValLoss));
    if val.len() < IMPROVING_EVALS || val.iter().any(|p| p.value <= 0.0) {
        return false;
    }
    super::fitted_change(&val, f64::ln).is_some_and(|(change, se)| change < -2.0 * se)
}

/// The validation loss swings with no net trend, or jumps up and back down (or down and back
/// up) at many of its evaluations even while it falls.
fn validation(ctx: &Ctx) -> Option<Finding> {
    let points = ctx.st.points(Series::ValLoss);
    let w = swings(points, usize::MAX)?;
    let stationary = w.amp >= VAL_AMPLITUDE && w.share >= 0.4 && w.drift < 0.3 && !w.rose;
    let (n, first) = zigzags(points);
    let evals = finite(points).len();
    let zigzag = n >= ZIGZAG_MIN && n as f64 >= ZIGZAG_SHARE * evals as f64;
    if !stationary && !zigzag {
        return None;
    }
    let mut f = finding(Series::ValLoss, &w).with("evaluations_swinging", n as f64);
    if zigzag && !stationary {
        f.step = first;
    }
    Some(f)
}

/// The finding for swings `w` of series `s`.
fn finding(s: Series, w: &Swings) -> Finding {
    let validation = s == Series::ValLoss;
    let rec = format!(
        "{} swings {:.0} % from {} to {} with no net progress: lower the peak LR x 0.3, raise \
         the effective batch to 32-64 (accumulate gradients), clip the gradient norm at 1.0; {}",
        s.name(),
        100.0 * w.amp,
        if validation { "evaluation" } else { "log" },
        if validation { "evaluation" } else { "log" },
        if validation {
            "a small validation set or BatchNorm statistics that differ between train and eval \
             modes give the same picture, so check the set's size and the eval mode"
        } else {
            "a dataset with duplicates or wrong labels gives the same picture, so audit it"
        }
    );
    Finding::new(Label::Oscillation, Severity::Warning, w.start, rec)
        .with("median_swing", w.amp)
        .with("sign_change_share", w.share)
        .with("net_drift_share", w.drift)
}
