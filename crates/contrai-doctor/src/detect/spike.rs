//! `loss_spike` and `grad_explode`: robust z-score in log space against the recent history. At
//! the run's end, a spike that gradient clipping bounded — the run clips, the spike stood alone
//! and the training loss went straight back to its level — is settled as information.

use super::{Ctx, finite, num};
use crate::finding::{Finding, Label, Severity};
use crate::series::Series;
use crate::stats::median_in_place;

/// Robust (median/MAD) z-score of the newest point against the previous `window` finite,
/// positive points, in log space. Returns (z, ratio to the median, median, step).
fn newest_z(ctx: &Ctx, series: Series, min_ratio: f64) -> Option<(f64, f64, f64, u64)> {
    let pts = ctx.st.points(series);
    let last = pts.last()?;
    if !(last.value.is_finite() && last.value > 0.0) {
        return None;
    }
    // A short log's window is at most a third of it (at least 8 points): the window of a log
    // written every few dozen steps would otherwise reach back into its first descent, whose
    // trend is no noise.
    let w = ctx.cfg.spike_window.min((pts.len() / 3).max(8)).clamp(4, 64);
    // The ring holds the logs of earlier points only: the newest point is appended after
    // the point checks run.
    let ring = &ctx.st.recent_logs[series.index()];
    let mut hist = [0.0f64; 64];
    let mut n = 0;
    for &v in ring.iter().rev().take(w) {
        if v.is_nan() {
            return None;
        }
        hist[n] = v;
        n += 1;
    }
    if n < 8.min(w) {
        return None;
    }
    // The median is at least the minimum: a point under min * ratio cannot be a spike.
    let x = last.value.ln();
    // Heavy-tailed per-batch noise (one hard sample in a small batch at a low loss) stays near
    // the highs the series reached within its last 64 points (its later half, in a short log:
    // the first descent is no noise); a point under `spike_ratio` times
    // that high needs twice the z-score to count (real spikes on a smooth curve score far above).
    let top = ring
        .iter()
        .rev()
        .take((pts.len() / 2).max(w))
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let revisit = x < top + ctx.cfg.spike_ratio.ln();
    let lo = hist[..n].iter().copied().fold(f64::INFINITY, f64::min);
    if x - lo < min_ratio.max(1.0).ln() {
        return None;
    }
    let h = &mut hist[..n];
    let m = median_in_place(h);
    for v in h.iter_mut() {
        *v = (*v - m).abs();
    }
    let mad = median_in_place(h);
    // Floor the scale at 1 % relative change so that a perfectly smooth curve is not "spiky".
    let scale = (1.4826 * mad).max(0.01);
    let z = (x - m) / scale;
    if revisit && z < 2.0 * ctx.cfg.spike_z {
        return None;
    }
    Some((z, (x - m).exp(), m.exp(), last.step))
}

/// Points a diverged loss must have stayed up for (the jump itself not counted).
const DIVERGED_FOR: usize = 3;
/// How far above everything before it a diverging jump goes.
const DIVERGED_JUMP: f64 = 4.0;

/// A training loss that diverged: [`blow_up`], else [`lasting_jump`].
pub fn divergence(ctx: &Ctx) -> Option<Finding> {
    blow_up(ctx).or_else(|| lasting_jump(ctx))
}

/// Points before a jump whose median is the level it left.
const LEVEL_BEFORE: usize = 10;
/// Points after a jump that must hold its new level (and at most looked at).
const LEVEL_AFTER: (usize, usize) = (5, 50);
/// Points before a jump its noise is measured on.
const NOISE_BEFORE: usize = 200;
/// Noise units (of one point before it) a lasting jump's new level must stand above the old.
const LASTING_Z: f64 = 3.0;

/// A training loss that jumped to [`DoctorConfig::spike_ratio`] times its level at once and
/// stayed there: the median of the points after the jump (at least [`LEVEL_AFTER`]'s first) and
/// the run's last points that far above the level before, above every point of it and beyond
/// [`LASTING_Z`] noise units. An update that threw the model off the minimum it was in (often
/// back to the classes' prior), which no single spike test sees: the points after the jump are
/// no spike, they are the level.
fn lasting_jump(ctx: &Ctx) -> Option<Finding> {
    let pts = finite(ctx.st.points(Series::TrainLoss));
    let v: Vec<f64> = pts.iter().map(|p| p.value).collect();
    let ratio = ctx.cfg.spike_ratio;
    let end = crate::stats::median(&v[v.len().saturating_sub(LEVEL_BEFORE)..])?;
    let material = super::material(ctx, Series::TrainLoss)?;
    (LEVEL_BEFORE..v.len().saturating_sub(LEVEL_AFTER.0 - 1)).find_map(|i| {
        let before = &v[i - LEVEL_BEFORE..i];
        let level = crate::stats::median(before)?;
        if level <= 0.0 || v[i] < ratio * level || end < ratio * level {
            return None;
        }
        let after = crate::stats::median(&v[i..(i + LEVEL_AFTER.1).min(v.len())])?;
        // The noise of the run's points so far: ten quiet points say little of a noisy loss.
        let logs: Vec<f64> = v[i.saturating_sub(NOISE_BEFORE)..i]
            .iter()
            .map(|x| x.max(f64::MIN_POSITIVE).ln())
            .collect();
        let noise = crate::stats::point_noise(&logs)?.max(0.01);
        let shift = (after / level).ln();
        // Above every point of the level it left: that level's own noise never reached it.
        let high = before.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lasting = after >= ratio * level && after > high && shift >= LASTING_Z * noise;
        (lasting && after - level >= material).then(|| {
            let p = pts[i];
            let rec = format!(
                "the loss jumped {:.1}x at step {} ({} -> {}) and stayed there (median {} \
                 since, {} at the end): an update threw the model off where it was; restart \
                 from the last checkpoint before step {} with the peak LR x 0.3, clip the global \
                 gradient norm at 1.0 and keep >= 3 % warmup",
                p.value / level,
                p.step,
                num(level),
                num(p.value),
                num(after),
                num(end),
                p.step
            );
            Finding::new(Label::LossSpike, Severity::Critical, p.step, rec)
                .with("ratio_to_level_before", after / level)
                .with("level_before", level)
                .with("level_after", after)
                .with("value", p.value)
                .with("last", end)
        })
    })
}

/// A training loss that jumped [`DIVERGED_JUMP`] times above everything before
/// it and never came back under twice that level: diverged, however short its history (the
/// robust spike test needs 8 points before it judges; a run can blow up at its second step).
fn blow_up(ctx: &Ctx) -> Option<Finding> {
    let pts = finite(ctx.st.points(Series::TrainLoss));
    let jump = DIVERGED_JUMP;
    let mut high = f64::NEG_INFINITY;
    for (i, p) in pts.iter().enumerate() {
        if i > 0 && high > 0.0 && p.value >= jump * high {
            let after = &pts[i + 1..];
            let stayed = after.len() >= DIVERGED_FOR && after.iter().all(|q| q.value > 2.0 * high);
            if !stayed {
                return None;
            }
            let last = after[after.len() - 1].value;
            let rec = format!(
                "the loss jumped {:.1}x at step {} ({} -> {}) and never came back (last {}): the \
                 run diverged; restart from the last checkpoint before step {} with the peak LR x \
                 0.1, clip the global gradient norm at 1.0 and keep >= 3 % warmup",
                p.value / high,
                p.step,
                num(high),
                num(p.value),
                num(last),
                p.step
            );
            return Some(
                Finding::new(Label::LossSpike, Severity::Critical, p.step, rec)
                    .with("ratio_to_previous_high", p.value / high)
                    .with("previous_high", high)
                    .with("value", p.value)
                    .with("last", last),
            );
        }
        high = high.max(p.value);
    }
    None
}

/// A point of the main loss (`loss`) far above its recent median.
pub fn loss_spike(ctx: &Ctx, loss: Series) -> Option<Finding> {
    // A loss that has gone below zero is a signed objective (a policy surrogate, a
    // negative log-likelihood or SI-SNR): no ratio to its median measures a jump.
    if ctx.st.signed[loss.index()] {
        return None;
    }
    let (z, ratio, med, step) = newest_z(ctx, loss, ctx.cfg.spike_ratio)?;
    if z < ctx.cfg.spike_z || ratio < ctx.cfg.spike_ratio {
        return None;
    }
    // A jump must be material on the loss's own scale (its initial level).
    if med * (ratio - 1.0) < super::material(ctx, loss)? {
        return None;
    }
    let lr_part = if let Some(peak_lr) = ctx.peak_lr() {
        format!("peak LR x 0.5 (to {})", num(peak_lr * 0.5))
    } else {
        "peak LR x 0.5".to_string()
    };
    let rec = format!(
        "{} jumped {:.1}x above its recent median {} at step {step}: lower the {lr_part}, clip \
         the global gradient norm at 1.0, keep >= 3 % warmup and an effective batch of 16-64; \
         if it repeats at the same data position, audit that data shard",
        if loss == Series::ValLoss {
            "the validation loss"
        } else {
            "loss"
        },
        ratio,
        num(med)
    );
    Some(
        Finding::new(Label::LossSpike, Severity::Warning, step, rec)
            .with("robust_z", z)
            .with("ratio_to_median", ratio)
            .with("recent_median", med)
            .with("value", med * ratio),
    )
}

/// Validation points before a validation jump whose median it is measured against.
const VAL_BEFORE: usize = 5;

/// A validation-loss point [`JUMP_RATIO`] times the median of the [`VAL_BEFORE`] evaluations
/// before it (a material change on its own scale), in a run whose main loss is the training
/// loss: the evaluation blew up between two evaluations while training went on — a spike the
/// training-loss test cannot see.
pub fn validation_jump(ctx: &Ctx) -> Option<Finding> {
    let pts = finite(ctx.st.points(Series::ValLoss));
    let (last, before) = pts.split_last()?;
    let before = &before[before.len().checked_sub(VAL_BEFORE)?..];
    let level = super::level(before)?;
    let ratio = last.value / level;
    if level <= 0.0 || ratio < JUMP_RATIO || last.value - level < super::material(ctx, Series::ValLoss)? {
        return None;
    }
    let rec = format!(
        "the validation loss jumped {ratio:.1}x above the median of its last {VAL_BEFORE} \
         evaluations ({}) at step {}, to {}: evaluation is unstable — BatchNorm statistics from \
         small batches (a larger batch, or freeze them late), weights thrown about by an LR \
         too high for this phase (peak LR x 0.5), or an overflow in half-precision evaluation; \
         keep the checkpoint with the best validation loss, not the last",
        num(level),
        last.step,
        num(last.value)
    );
    Some(
        Finding::new(Label::LossSpike, Severity::Warning, last.step, rec)
            .with("ratio_to_median", ratio)
            .with("recent_median", level)
            .with("value", last.value)
            .with("on_validation", 1.0),
    )
}

/// A gradient-norm point an order of magnitude above its recent median.
pub fn grad_explode(ctx: &Ctx) -> Option<Finding> {
    let (z, ratio, med, step) = newest_z(ctx, Series::GradNorm, ctx.cfg.grad_explode_ratio)?;
    if z < ctx.cfg.spike_z || ratio < ctx.cfg.grad_explode_ratio {
        return None;
    }
    // An isolated spike that clipping absorbs is not an explosion: it must be two orders of
    // magnitude, or the loss must react (jump or turn non-finite) at the same step.
    let loss = ctx.st.points(Series::TrainLoss).last();
    let loss_reacts = loss.is_some_and(|p| {
        p.step == step
            && (!p.value.is_finite()
                || newest_z(ctx, Series::TrainLoss, ctx.cfg.spike_ratio)
                    .is_some_and(|(_, r, _, _)| r >= ctx.cfg.spike_ratio))
    });
    if ratio < 10.0 * ctx.cfg.grad_explode_ratio && !loss_reacts {
        return None;
    }
    let rec = format!(
        "gradient norm reached {:.1}x its recent median ({}) at step {step}: clip the global \
         gradient norm at {} (about 2x the median), use bf16 instead of fp16, and lower the peak \
         LR x 0.5",
        ratio,
        num(med),
        num(2.0 * med)
    );
    Some(
        Finding::new(Label::GradExplode, Severity::Critical, step, rec)
            .with("robust_z", z)
            .with("ratio_to_median", ratio)
            .with("recent_median", med),
    )
}

/// Training-loss points compared before and after a spike to tell a lasting rise.
const SETTLE_WINDOW: usize = 10;
/// A jump: a training-loss point this many times the median of the 20 before it.
const JUMP_RATIO: f64 = 10.0;
/// Jumps a run may have for its spikes to count as batch noise: this share of its loss points
/// (a hard sample in a small batch at a low loss, every few dozen steps), and two at least.
const JUMP_SHARE: f64 = 0.02;

/// Settles a spike finding at the run's end: in a run that clips, a spike with no lasting rise
/// (the loss's median over the next points back within `spike_ratio` of its median before) in
/// a run whose jumps of [`JUMP_RATIO`] are rare ([`JUMP_SHARE`]) becomes information, its
/// advice kept for if it recurs more often.
pub fn settle(ctx: &Ctx, f: &mut Finding) {
    let Some(clip) = ctx.st.hints.clip_norm else {
        return;
    };
    if !matches!(f.label, Label::LossSpike | Label::GradExplode) || f.severity == Severity::Info {
        return;
    }
    let loss = finite(ctx.st.points(Series::TrainLoss));
    let Some(at) = loss.iter().position(|p| p.step >= f.step) else {
        return;
    };
    let before: Vec<f64> = loss[at.saturating_sub(2 * SETTLE_WINDOW)..at]
        .iter()
        .map(|p| p.value)
        .collect();
    let after: Vec<f64> = loss[at + 1..]
        .iter()
        .take(SETTLE_WINDOW)
        .map(|p| p.value)
        .collect();
    let (Some(level), Some(then)) = (crate::stats::median(&before), crate::stats::median(&after)) else {
        return;
    };
    let jumps = count_jumps(&loss.iter().map(|p| p.value).collect::<Vec<_>>(), JUMP_RATIO);
    let allowed = ((JUMP_SHARE * loss.len() as f64) as usize).max(2);
    if after.len() < SETTLE_WINDOW / 2 || then > level * ctx.cfg.spike_ratio || jumps > allowed {
        return;
    }
    f.severity = Severity::Info;
    f.recommendation = format!(
        "a passing spike at step {} ({jumps} jump(s) of {JUMP_RATIO}x in {} loss points, each \
         gone at once): the run clips the gradient norm at {}, which bounded the update, and the \
         training loss was back at its level (median {} before, {} after): nothing to do. If \
         spikes come more often or the loss stays up: {}",
        f.step,
        loss.len(),
        num(clip),
        num(level),
        num(then),
        f.recommendation
    );
}

/// Jumps (log-ratios to the median of the 20 points before) at least half a spike's that a
/// long loss must hold before its shape is read...
const TAIL_POINTS: usize = 20;
/// ...and the most of them that may reach three quarters of the spike's for it to be the top
/// of a tail: jumps that thin out as they grow (batch noise) rather than a cluster of like ones
/// (recurring spikes) or one alone.
const TAIL_THINS: f64 = 0.25;

/// True when a training-loss spike is the top of its loss's own tail of jumps: of the points
/// that jumped at least half as far (in log ratio), at least [`TAIL_POINTS`], at most
/// [`TAIL_THINS`] jumped three quarters as far — a heavy-tailed batch noise's largest draw,
/// not an event. Judged on the whole run, at its end.
pub fn in_its_tail(ctx: &Ctx, f: &Finding) -> bool {
    if f.label != Label::LossSpike || f.evidence.contains_key("on_validation") {
        return false;
    }
    let Some(ratio) = f.evidence.get("ratio_to_median").copied().filter(|r| *r > 1.0) else {
        return false;
    };
    let values: Vec<f64> = finite(ctx.st.points(Series::TrainLoss))
        .iter()
        .map(|p| p.value)
        .collect();
    let jumps: Vec<f64> = levels_before(&values, 8, 0)
        .filter(|&(i, _)| values[i] > 0.0)
        .map(|(i, m)| (values[i] / m).ln())
        .collect();
    let at_least = |share: f64| jumps.iter().filter(|&&r| r >= share * ratio.ln()).count();
    let (half, most) = (at_least(0.5), at_least(0.75));
    half >= TAIL_POINTS && (most as f64) <= TAIL_THINS * half as f64
}

/// Whether a point of `loss` from `from` on stands [`JUMP_RATIO`] times the median of the 20
/// before it.
pub(crate) fn jumped(ctx: &Ctx, loss: Series, from: u64) -> bool {
    let pts = finite(ctx.st.points(loss));
    let values: Vec<f64> = pts.iter().map(|p| p.value).collect();
    let first = pts.iter().position(|p| p.step >= from).unwrap_or(pts.len());
    jump_points(&values, JUMP_RATIO).any(|i| i >= first)
}

/// Each point from `from` on with its level: the median of the up to 20 points before it (those
/// before `skip` left out), when that is positive — what a jump is measured against.
pub(crate) fn levels_before(
    values: &[f64],
    from: usize,
    skip: usize,
) -> impl Iterator<Item = (usize, f64)> + '_ {
    (from..values.len()).filter_map(move |i| {
        let m = crate::stats::median(&values[i.saturating_sub(20).max(skip)..i])?;
        (m > 0.0).then_some((i, m))
    })
}

/// Points at least `ratio` times the median of the 20 before them.
fn jump_points(values: &[f64], ratio: f64) -> impl Iterator<Item = usize> + '_ {
    levels_before(values, 8, 0).filter_map(move |(i, m)| (values[i] >= ratio * m).then_some(i))
}

/// How many points are at least `ratio` times the median of the 20 before them.
fn count_jumps(values: &[f64], ratio: f64) -> usize {
    jump_points(values, ratio).count()
}
