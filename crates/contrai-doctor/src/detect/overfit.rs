//! `overfitting`: validation has not improved for several evaluations (about 300 steps, in the
//! log's own eval cadence) while the training loss still falls; or validation has risen at every
//! one of its last evaluations ([`SUSTAINED`]; at the end, few for a steep one: [`STEEP`]) while
//! the training loss fell by more than [`SUSTAINED_TRAIN_FALL`]. Reports the best step, the
//! generalisation gap and Prechelt's GL.

use super::{Ctx, finite, fitted_change, num, rel_drop};
use crate::doctor::RunState;
use crate::finding::{Finding, Label, Severity};
use crate::series::{Checkpoint, Point, Series, XUnit};
use crate::stats::{block_medians, median, median_gap, robust_sigma};

/// Evaluations since the best (and before it) that tell a level from a rise.
const LEVEL_EVALS: usize = 6;
/// A sustained rise: consecutive rising evaluations, and the total relative rise of validation
/// over them, that make one — a material rise, as the labelled set's vocabulary defines
/// overfitting (`eval/doctor-real/LABELLING.md`: 5–10 % above the minimum). A steady rise of 1 %
/// while the training loss falls by a third is validation levelling off, not yet the model
/// fitting noise (a labelled seq2seq run: its ROUGE still rose).
const SUSTAINED: (usize, f64) = (4, 0.05);
/// A steep rise, judged once the run has ended: twice the vocabulary's material rise over each
/// of the last two evaluations. A run evaluated three times, worse by a third and then by a half
/// after its first evaluation, never reaches a patience (a labelled classifier); live, two noisy
/// evaluations early in a run are no evidence yet (the patience waits for more).
const STEEP: (usize, f64) = (2, 0.2);
/// ... while the training loss fell by more than this share since the rise began.
pub const SUSTAINED_TRAIN_FALL: f64 = 0.2;

/// Reviews the validation and training losses; `final_` at the run's end.
pub fn check(ctx: &Ctx, final_: bool) -> Option<Finding> {
    past_patience(ctx).or_else(|| sustained_rise(ctx, final_))
}

/// [`check`] on each part of a loss logged in parts (a detector's objectness loss, one task of
/// a multi-task model), the first part that overfits: its validation can worsen while the
/// summed validation loss, its other parts falling, stays level.
pub fn in_parts(ctx: &Ctx) -> Option<Finding> {
    ctx.st.parts.iter().find_map(|part| {
        let mut st = RunState {
            hints: ctx.st.hints.clone(),
            ..RunState::default()
        };
        st.series[Series::TrainLoss.index()].clone_from(&part.train);
        st.series[Series::ValLoss.index()].clone_from(&part.val);
        let mut f = check(
            &Ctx {
                cfg: ctx.cfg,
                st: &st,
            },
            true,
        )?;
        f.recommendation = format!(
            "the validation loss's `{}` part overfits while the main validation loss does not \
             show it: {}",
            part.name, f.recommendation
        );
        Some(f)
    })
}

/// Validation has not improved for the patience and sits clearly above its best.
fn past_patience(ctx: &Ctx) -> Option<Finding> {
    let mut val = finite(ctx.st.points(Series::ValLoss));
    if val.len() < 3 {
        return None;
    }
    let noise = relative_noise(&val.iter().map(|p| p.value).collect::<Vec<_>>());
    // A noisy validation curve is judged on its running median of 3 (robust to one bad eval).
    if val.len() >= 5 {
        let raw: Vec<f64> = val.iter().map(|p| p.value).collect();
        for i in 1..val.len() - 1 {
            let mut w = [raw[i - 1], raw[i], raw[i + 1]];
            w.sort_by(f64::total_cmp);
            val[i].value = w[1];
        }
    }
    let steps: Vec<u64> = val.iter().map(|p| p.step).collect();
    let cadence = median_gap(&steps).max(1.0);
    let patience = match ctx.st.hints.x_unit {
        XUnit::Epoch => ctx.cfg.patience_evals,
        XUnit::Step => ctx
            .cfg
            .patience_evals
            .max((ctx.cfg.patience_steps / cadence).ceil() as usize),
    };
    // Best eval: the earliest minimum (later evals must beat it by 0.1 % to count).
    let mut best = 0;
    for (i, p) in val.iter().enumerate() {
        if p.value < val[best].value * (1.0 - 1e-3) {
            best = i;
        }
    }
    let since = val.len() - 1 - best;
    if since < patience {
        return None;
    }
    let best_p = val[best];
    let after: Vec<f64> = val[best + 1..].iter().map(|p| p.value).collect();
    let after_med = median(&after)?;
    // The validation loss must sit clearly above its best: by 1 % and by twice the noise of the
    // median of the evaluations since (one evaluation's noise over √k: a noisy curve that stays
    // up for many evaluations is as clear as a smooth one that rises a little).
    // The noise is the curve's own since its best when that is long enough to tell (the descent
    // before it is trend, not noise).
    let since_best: Vec<f64> = raw_val(ctx).into_iter().skip(best).collect();
    let noise = if since_best.len() >= 5 {
        relative_noise(&since_best)
    } else {
        noise
    };
    let noise_of_median = noise / (after.len() as f64).sqrt();
    // The best is the lowest of the evaluations that reached its level: on a noisy level curve
    // it sits under that level by selection alone (about one sigma for the least of a few
    // smoothed evaluations), so the evaluations since must clear it by one sigma too.
    if after_med <= best_p.value * (1.0 + 0.01_f64.max(2.0 * noise_of_median).max(noise)) {
        return None;
    }
    if !rises_since(&finite(ctx.st.points(Series::ValLoss)), best) {
        return None;
    }
    let (at_best, at_end, fall) = train_levels(ctx, best_p.step)?;
    // The checkpoint to resume from is the raw best evaluation (the smoothed curve only judges).
    let best_p = raw_best(ctx).unwrap_or(best_p);
    // The training loss still falls: its two levels apart by more than its log-to-log swing and
    // by `train_fall_min`, or — two levels of a few noisy logs each can hide a fall all the logs
    // since show — its robust line since the best falling beyond its own noise.
    let clear = fall >= ctx.cfg.train_fall_min && beyond_swing(ctx, at_best, at_end);
    // A training loss above its level at the best has not gone on fitting (a second run
    // appended to the log starts over from a worse level, whatever its own line does).
    if !clear && (fall <= 0.0 || !falls_beyond_noise(ctx, best_p.step)) {
        return None;
    }
    let start = val[best + 1].step;
    let last_val = val[val.len() - 1].value;
    let gl = 100.0 * (last_val / best_p.value - 1.0);
    let severity = if gl > 10.0 {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let why = format!(
        "validation has not improved for {since} evals while the training loss fell {:.1} %",
        100.0 * fall
    );
    let f = finding(
        ctx,
        severity,
        start,
        best_p,
        &why,
        patience,
        (at_best, at_end, fall),
        last_val,
    );
    Some(
        f.with("evals_since_best", since as f64)
            .with("eval_cadence", cadence),
    )
}

/// Validation rose at each of its last evaluations, by [`SUSTAINED`]'s total (or, at the end,
/// [`STEEP`]'s) and by more than its noise, while the training loss fell by more than
/// [`SUSTAINED_TRAIN_FALL`] since the best evaluation: a small rise, but a steady one.
fn sustained_rise(ctx: &Ctx, final_: bool) -> Option<Finding> {
    let val = finite(ctx.st.points(Series::ValLoss));
    let (rises, least) = SUSTAINED;
    rose_at_each(ctx, &val, rises, least).or_else(|| {
        let (rises, least) = STEEP;
        final_.then(|| rose_at_each(ctx, &val, rises, least)).flatten()
    })
}

/// [`sustained_rise`] over the last `rises` evaluations, rising `least` or more in all.
fn rose_at_each(ctx: &Ctx, val: &[Point], rises: usize, least: f64) -> Option<Finding> {
    if val.len() < rises + 1 {
        return None;
    }
    let from = val.len() - 1 - rises;
    if !val[from..].windows(2).all(|w| w[1].value > w[0].value) {
        return None;
    }
    let (low, last) = (val[from], val[val.len() - 1]);
    let rise = last.value / low.value - 1.0;
    // Noise near the current level: the early descent's curvature is no noise of the rise.
    let tail = &val[val.len() - (val.len() / 2).max(rises + 2).min(val.len())..];
    let noise = relative_noise(&tail.iter().map(|p| p.value).collect::<Vec<_>>());
    if low.value <= 0.0 || rise < least.max(3.0 * noise) {
        return None;
    }
    // The best evaluation: the earliest minimum up to the rise's start.
    let best = val[..=from]
        .iter()
        .copied()
        .reduce(|b, p| if p.value < b.value * (1.0 - 1e-3) { p } else { b })?;
    let (at_best, at_end, fall) = train_fall_since(ctx, best.step)?;
    if fall <= SUSTAINED_TRAIN_FALL {
        return None;
    }
    let why = format!(
        "validation rose at each of the last {rises} evals ({:.1} % in all) while the training \
         loss fell {:.1} %",
        100.0 * rise,
        100.0 * fall
    );
    let f = finding(
        ctx,
        Severity::Warning,
        val[from + 1].step,
        best,
        &why,
        rises,
        (at_best, at_end, fall),
        last.value,
    );
    Some(f.with("sustained_rise", rise).with("rising_evals", rises as f64))
}

/// [`train_levels`], `None` when the fall is within the training loss's own log-to-log swing.
fn train_fall_since(ctx: &Ctx, step: u64) -> Option<(f64, f64, f64)> {
    let (at_best, at_end, fall) = train_levels(ctx, step)?;
    beyond_swing(ctx, at_best, at_end).then_some((at_best, at_end, fall))
}

/// The training loss's level at `step` and at the end, and its relative fall between them;
/// `None` with fewer than two training points after `step`.
fn train_levels(ctx: &Ctx, step: u64) -> Option<(f64, f64, f64)> {
    let train = finite(ctx.st.points(Series::TrainLoss));
    let before: Vec<f64> = train.iter().filter(|p| p.step <= step).map(|p| p.value).collect();
    let later: Vec<f64> = train.iter().filter(|p| p.step > step).map(|p| p.value).collect();
    if later.len() < 2 {
        return None;
    }
    // Level at the step: the last few training points up to it (or the first after it).
    let k = (later.len() / 4).clamp(3, 50).min(later.len());
    let at_best = if before.is_empty() {
        median(&later[..k])?
    } else {
        median(&before[before.len().saturating_sub(k)..])?
    };
    let at_end = median(&later[later.len() - k..])?;
    Some((at_best, at_end, rel_drop(at_best, at_end)))
}

/// Whether a fall of the training loss from `at_best` to `at_end` exceeds twice its own
/// log-to-log swing (else it is noise); true where logs cannot be taken.
fn beyond_swing(ctx: &Ctx, at_best: f64, at_end: f64) -> bool {
    let train = finite(ctx.st.points(Series::TrainLoss));
    if !(at_best > 0.0 && at_end > 0.0 && train.iter().all(|p| p.value > 0.0)) {
        return true;
    }
    let logs: Vec<f64> = train.iter().map(|p| p.value.ln()).collect();
    let blocks = block_medians(&logs, 60);
    let swings: Vec<f64> = blocks.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    let swing = median(&swings).unwrap_or(0.0);
    (at_best / at_end).ln() >= 2.0 * swing
}

/// Standard errors by which a training loss's fitted fall since a step must clear zero.
const FALL_SE: f64 = 3.0;

/// Whether the training loss has kept falling since `step` along its robust line (in log space)
/// by more than [`FALL_SE`] standard errors: a long, quiet run creeping down less than
/// [`DoctorConfig::train_fall_min`] is still fitting its training set while validation worsens.
///
/// [`DoctorConfig::train_fall_min`]: crate::DoctorConfig::train_fall_min
fn falls_beyond_noise(ctx: &Ctx, step: u64) -> bool {
    let train = finite(ctx.st.points(Series::TrainLoss));
    let since: Vec<Point> = train
        .into_iter()
        .filter(|p| p.step >= step && p.value > 0.0)
        .collect();
    since.len() >= LEVEL_EVALS
        && fitted_change(&since, f64::ln).is_some_and(|(change, se)| change < -FALL_SE * se)
}

/// The finding: stop where validation turned, back to the best checkpoint.
#[allow(clippy::too_many_arguments)]
fn finding(
    ctx: &Ctx,
    severity: Severity,
    start: u64,
    best: Point,
    why: &str,
    patience: usize,
    (at_best, at_end, fall): (f64, f64, f64),
    last_val: f64,
) -> Finding {
    let gl = 100.0 * (last_val / best.value - 1.0);
    // The stop is never before the best checkpoint it names: at the first evaluation after it.
    let after_best = finite(ctx.st.points(Series::ValLoss))
        .iter()
        .map(|p| p.step)
        .find(|&s| s > best.step)
        .unwrap_or(best.step);
    let start = start.max(after_best);
    let (resume, saved) = resume_from(&ctx.st.hints.checkpoints, best.step);
    let rec = format!(
        "stop at step {start}: the best checkpoint was step {} (val loss {}); {why}. Resume \
         from {resume} with early stopping (patience {patience} evals), peak LR x 0.5 and more \
         regularisation (weight decay 0.05-0.1, dropout +0.1), or add data",
        best.step,
        num(best.value),
    );
    let f = Finding::new(Label::Overfitting, severity, start, rec)
        .with("best_step", best.step as f64)
        .with("best_val_loss", best.value)
        .with("last_val_loss", last_val)
        .with("generalisation_loss_gl", gl)
        .with("generalisation_gap", last_val - at_end)
        .with("train_loss_at_best", at_best)
        .with("train_loss_last", at_end)
        .with("train_fall", fall);
    match saved {
        Some(step) => f.with("resume_checkpoint_step", step as f64),
        None => f,
    }
}

/// Whether validation since its best evaluation rises — its own trend up beyond twice its
/// error, or its level above that of as many evaluations before the best beyond the two levels'
/// noise (a step up) — rather than staying level: a noisy curve that converged sits around the
/// level its best reached, the best below it by selection alone. Too few evaluations since the
/// best, or before it, to tell a level: the patience's verdict stands.
fn rises_since(val: &[Point], best: usize) -> bool {
    let (before, after) = (&val[..best], &val[best + 1..]);
    let before = &before[before.len().saturating_sub(after.len())..];
    if after.len() < LEVEL_EVALS || before.len() < LEVEL_EVALS {
        return true;
    }
    let Some((change, error)) = fitted_change(after, |v| v) else {
        return true;
    };
    if change > 2.0 * error {
        return true;
    }
    let y: Vec<f64> = after.iter().map(|p| p.value).collect();
    let b: Vec<f64> = before.iter().map(|p| p.value).collect();
    let (Some(level), Some(before_level)) = (median(&y), median(&b)) else {
        return true;
    };
    let spread = robust_sigma(&y, level);
    let k = (1.0 / y.len() as f64 + 1.0 / b.len() as f64).sqrt();
    level - before_level > 2.0 * spread * k
}

/// The raw validation losses, in step order.
fn raw_val(ctx: &Ctx) -> Vec<f64> {
    finite(ctx.st.points(Series::ValLoss))
        .iter()
        .map(|p| p.value)
        .collect()
}

/// The evaluation with the lowest raw validation loss (the earliest of equals): the checkpoint a
/// user keeps as the best (a smoothed curve's best can be a step whose own loss was not).
fn raw_best(ctx: &Ctx) -> Option<Point> {
    finite(ctx.st.points(Series::ValLoss))
        .into_iter()
        .reduce(|b, p| if p.value < b.value { p } else { b })
}

/// Relative noise of a series, as the sigma of one point: the robust spread of its second
/// differences (a straight trend cancels out), outliers — one bad evaluation, say — left out.
fn relative_noise(v: &[f64]) -> f64 {
    if v.len() < 5 {
        return 0.0;
    }
    let d: Vec<f64> = v
        .windows(3)
        .map(|w| (w[2] - 2.0 * w[1] + w[0]) / w[1].abs().max(1e-12))
        .collect();
    let spread = |d: &[f64]| -> Option<(f64, f64)> {
        let m = median(d)?;
        Some((m, robust_sigma(d, m)))
    };
    let Some((m, sigma)) = spread(&d) else { return 0.0 };
    let kept: Vec<f64> = d
        .iter()
        .copied()
        .filter(|x| sigma == 0.0 || (x - m).abs() <= 3.5 * sigma)
        .collect();
    // A second difference carries the noise of three points: variance 6 sigma^2.
    spread(&kept).map_or(0.0, |(_, s)| s / 6f64.sqrt())
}

/// Where to resume for a best evaluation at `best`: the checkpoint saved there, else the last
/// saved before it, else the first after it — named as the run's folder shows it; "step N" when
/// the run's folders show no checkpoint. Returns the text and the checkpoint's step.
fn resume_from(saved: &[Checkpoint], best: u64) -> (String, Option<u64>) {
    let before = saved.iter().rev().find(|c| c.step <= best);
    match before.or_else(|| saved.iter().find(|c| c.step > best)) {
        None => (format!("step {best}"), None),
        Some(c) if c.step == best => (c.name.clone(), Some(c.step)),
        Some(c) if c.step < best => (
            format!("{} (step {}, the last saved before it)", c.name, c.step),
            Some(c.step),
        ),
        Some(c) => (
            format!(
                "{} (step {}: none was kept at or before step {best})",
                c.name, c.step
            ),
            Some(c.step),
        ),
    }
}
