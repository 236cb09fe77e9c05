//! Schedule facts from the logged LR: warmup share and final/peak ratio; with no LR logged, from
//! the schedule and warmup the run's own files state (quoted as the finding's detail).

use super::{Ctx, finite, num};
use crate::finding::{Detail, Finding, Label, Severity};
use crate::series::{Point, Series, XUnit};
use crate::stated_setup::{EPOCH_KEYS, LrSchedule, SCHEDULE_KEYS, Setting};
use crate::stats::{median, point_noise};

/// Reviews the LR series; `final_` is true at the end of the run.
pub fn check(ctx: &Ctx, final_: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    let pts = finite(ctx.st.points(Series::Lr));
    if pts.is_empty() {
        return if final_ { from_setup(ctx) } else { out };
    }
    // An LR logged once or twice tells nothing of its course: the files' setup does.
    if pts.len() < 5 {
        return if final_ { from_setup(ctx) } else { out };
    }
    let peak = pts.iter().map(|p| p.value).fold(0.0, f64::max);
    if peak <= 0.0 {
        return out;
    }
    let peak_i = pts.iter().position(|p| p.value >= 0.95 * peak).unwrap_or(0);
    let first = pts[0];
    let last = pts[pts.len() - 1];
    let total = planned_total(ctx, last.step).max(1) as f64;
    let has_warmup = first.value < 0.5 * peak && peak_i > 0;
    let warmup_steps = pts[peak_i].step as f64 - warmup_start(&pts[..=peak_i]);
    // The warmup is known once the LR has stopped rising.
    let warmup_done = peak_i + 2 < pts.len();
    let frac = warmup_steps / total;
    let advised = (0.03 * total).round();
    // Its share of the run is known at the end, or live when the log states the planned total.
    let share_known = final_ || ctx.st.hints.total_steps.is_some();
    // No warmup (the LR starts at half its peak or more) or a short one, and the loss rose in
    // the run's first steps: the peak LR hit an untrained model. A short warmup the loss came
    // through unharmed is no finding: the label is a warmup too short "where it hurts".
    let short = has_warmup && frac < ctx.cfg.warmup_min;
    let rise = if !has_warmup || short {
        early_rise(ctx, total).or_else(|| final_.then(|| early_jumps(ctx, total)).flatten())
    } else {
        None
    };
    if has_warmup && share_known && (warmup_done || final_) && frac > ctx.cfg.warmup_max {
        let rec = format!(
            "the LR warms up over {} steps ({:.0} % of {}): shorten the warmup to 2-5 % (~{} \
             steps), then cosine-decay to 0.1x peak ({})",
            warmup_steps,
            100.0 * frac,
            total,
            advised,
            num(peak * 0.1)
        );
        out.push(
            Finding::new(Label::LrWarmupTooLong, Severity::Warning, first.step, rec)
                .with("warmup_steps", warmup_steps)
                .with("warmup_fraction", frac)
                .with("peak_lr", peak)
                .with("total_steps", total),
        );
    }
    if share_known && let Some((low, high, at)) = rise {
        let how = if short {
            format!("after only {warmup_steps} steps")
        } else {
            format!("from step {} with no warmup", first.step)
        };
        let rec = format!(
            "the LR is at its peak {} {how}, and the loss rose {:.1}x in the run's first steps \
             ({} -> {} at step {at}): warm up over 3 % of the steps (~{advised}), then decay",
            num(peak),
            high / low,
            num(low),
            num(high)
        );
        out.push(
            Finding::new(Label::LrWarmupTooShort, Severity::Warning, first.step, rec)
                .with("warmup_steps", if short { warmup_steps } else { 0.0 })
                .with("peak_lr", peak)
                .with("first_loss", low)
                .with("early_high", high)
                .with("early_high_step", at as f64),
        );
    }
    // No decay: judged at the end, or live once past half of the planned steps.
    let known_total = ctx.st.hints.total_steps.is_some();
    let late = final_ || (known_total && last.step as f64 >= 0.5 * total);
    let after_peak = pts.len() - peak_i - 1;
    let span_after = (last.step.saturating_sub(pts[peak_i].step)) as f64;
    if late && after_peak >= 3 && span_after >= 0.3 * total {
        let ratio = last.value / peak;
        // Never under the ratio after the peak, the last point included: a schedule that decayed
        // and began again (a resume, a warm restart) did decay.
        let lowest = pts[peak_i..].iter().map(|p| p.value).fold(peak, f64::min);
        if lowest >= ctx.cfg.no_decay_ratio * peak {
            let rec = format!(
                "the LR stays at {:.0} % of its peak {} to the end: use cosine decay with 3 % \
                 warmup (~{} steps) down to min_lr = 0.1x peak ({}); at the least, drop to peak \
                 LR x 0.25 ({}) for the last 20 % of the steps",
                100.0 * ratio,
                num(peak),
                advised,
                num(peak * 0.1),
                num(peak * 0.25)
            );
            out.push(
                Finding::new(Label::LrNoDecay, Severity::Warning, pts[peak_i].step, rec)
                    .with("final_over_peak", ratio)
                    .with("peak_lr", peak)
                    .with("final_lr", last.value)
                    .with("peak_step", pts[peak_i].step as f64),
            );
        }
    }
    out
}

/// Where a warmup logged as `rise` (first log to peak) began: its line taken back to an LR of 0
/// (a sparse log's first LR is already part-way up: a warmup logged every 500 steps from 1.5e-3
/// to a 3e-3 peak at step 1000 began at step 0), never before step 0 nor after the first log.
fn warmup_start(rise: &[Point]) -> f64 {
    let (first, peak) = (rise[0], rise[rise.len() - 1]);
    let (x0, x1) = (first.step as f64, peak.step as f64);
    if peak.value <= first.value || x1 <= x0 {
        return x0;
    }
    let slope = (peak.value - first.value) / (x1 - x0);
    (x0 - first.value / slope).clamp(0.0, x0)
}

/// The run's planned steps when the log states them (and reached no further), else its last.
fn planned_total(ctx: &Ctx, last: u64) -> u64 {
    ctx.st.hints.total_steps.filter(|t| *t >= last).unwrap_or(last)
}

/// The share of the run its first steps are, where an early rise of the loss shows.
const EARLY: f64 = 0.2;
/// The fewest logs an early rise is judged on.
const EARLY_LOGS: usize = 5;
/// An early rise: the loss this many times its first logged value...
const EARLY_RISE: f64 = 1.5;
/// ...or its early logs after the first this many times it at their median, with the high this
/// many of the loss's own point-noise units above it (a quiet loss that climbs 25 % and stays
/// up is as clear as a noisy one that jumps 1.5x).
const EARLY_LIFT: (f64, f64) = (1.1, 8.0);

/// The training loss's first logged value, and its highest over the run's first [`EARLY`]
/// (at least its first [`EARLY_LOGS`] logs, in a sparse log, while they lie in its first half)
/// with its step, when that high is [`EARLY_RISE`] times the first.
fn early_rise(ctx: &Ctx, total: f64) -> Option<(f64, f64, u64)> {
    let loss = finite(ctx.st.points(Series::TrainLoss));
    let first = loss.first()?;
    let (until, half) = (first.step as f64 + EARLY * total, first.step as f64 + total / 2.0);
    let early: Vec<_> = loss
        .iter()
        .enumerate()
        .take_while(|(i, p)| (p.step as f64) <= until || (*i < EARLY_LOGS && (p.step as f64) <= half))
        .map(|(_, p)| p)
        .collect();
    if early.len() < EARLY_LOGS || first.value <= 0.0 {
        return None;
    }
    let high = early.iter().skip(1).max_by(|a, b| a.value.total_cmp(&b.value))?;
    // The lift is judged once the early stretch is over (its noise known from the points past
    // it), and only where the rise is under [`EARLY_RISE`]: a review's hot path stays cheap.
    let lifted = || {
        if loss.len() <= early.len() {
            return false;
        }
        let after: Vec<f64> = early[1..].iter().map(|p| p.value).collect();
        let values: Vec<f64> = loss.iter().map(|p| p.value).collect();
        median(&after).is_some_and(|m| m >= EARLY_LIFT.0 * first.value)
            && point_noise(&values).is_some_and(|n| high.value - first.value >= EARLY_LIFT.1 * n)
    };
    (high.value >= EARLY_RISE * first.value || lifted()).then_some((first.value, high.value, high.step))
}

/// A jump: a training-loss point this many times the median of the points before it (the
/// labelled set's loss spike)...
const JUMP: f64 = 2.0;
/// ...and the fewest jumps that make the early stretch unstable.
const EARLY_JUMPS: usize = 2;

/// At the run's end: the training loss jumped ([`JUMP`]) at least [`EARLY_JUMPS`] times in the
/// run's first [`EARLY`] — each against the median of up to 20 points before it, its first
/// point (an untrained model's, or a first epoch's blow-up) left out — and never after, in a log
/// that goes on at least as long again: the instability belonged to the peak LR meeting an
/// untrained model, whatever the first log was.
/// Returns the level before the highest early jump, that jump and its step.
fn early_jumps(ctx: &Ctx, total: f64) -> Option<(f64, f64, u64)> {
    let loss = finite(ctx.st.points(Series::TrainLoss));
    let until = loss.first()?.step as f64 + EARLY * total;
    // "Never after" needs an after at least as long as the early stretch.
    if (loss.last()?.step as f64) < until + EARLY * total {
        return None;
    }
    let values: Vec<f64> = loss.iter().map(|p| p.value).collect();
    let jumps: Vec<(f64, Point)> = super::spike::levels_before(&values, 3, 1)
        .filter(|&(i, level)| values[i] >= JUMP * level)
        .map(|(i, level)| (level, loss[i]))
        .collect();
    let (early, late): (Vec<_>, Vec<_>) = jumps.into_iter().partition(|(_, p)| (p.step as f64) <= until);
    if early.len() < EARLY_JUMPS || !late.is_empty() {
        return None;
    }
    let (level, high) = early.into_iter().max_by(|a, b| a.1.value.total_cmp(&b.1.value))?;
    Some((level, high.value, high.step))
}

/// With no LR logged: a constant schedule, or a warmup over [`DoctorConfig::warmup_max`] of the
/// run, as the run's arguments state them.
///
/// [`DoctorConfig::warmup_max`]: crate::DoctorConfig::warmup_max
fn from_setup(ctx: &Ctx) -> Vec<Finding> {
    let setup = &ctx.st.hints.setup;
    let loss = finite(ctx.st.points(super::main_loss(ctx.st)));
    let (Some(first), Some(last)) = (loss.first(), loss.last()) else {
        return Vec::new();
    };
    // A log by the epoch counts no optimizer steps: a warmup in steps is set against the steps
    // the files state, if they do.
    let total = match ctx.st.hints.x_unit {
        XUnit::Epoch => ctx.st.hints.total_steps,
        XUnit::Step => Some(planned_total(ctx, last.step)),
    }
    .filter(|t| *t > 0);
    let peak = setup
        .peak_lr
        .map(|p| format!(" ({})", num(p)))
        .unwrap_or_default();
    let quoted = |s: &Setting| format!("`{}: {}` in {}", s.key, s.value, s.file);
    let mut out = Vec::new();
    if setup.schedule.and_then(LrSchedule::decays) == Some(false)
        && let Some(s) = setup.setting(&SCHEDULE_KEYS)
    {
        let rec = format!(
            "the run's LR never decays ({}; the LR's course is not logged): use cosine decay \
             with 3 % warmup down to min_lr = 0.1x the peak LR{peak}; at the least, drop the LR \
             x 0.25 for the last 20 % of the steps",
            quoted(s)
        );
        let mut f = Finding::new(Label::LrNoDecay, Severity::Warning, first.step, rec);
        if let Some(p) = setup.peak_lr {
            f = f.with("peak_lr", p);
        }
        f.detail = Some(Detail::Setting(s.clone()));
        out.push(f);
    }
    if let Some(share) = setup.warmup_share(total)
        && share > ctx.cfg.warmup_max
        && let Some(s) = setup.setting(&["warmup_ratio", "warmup_steps", "warmup_epochs"])
    {
        let epochs = setup
            .setting(&EPOCH_KEYS)
            .filter(|_| s.key == "warmup_epochs")
            .map(|e| format!(" of {}", quoted(e)))
            .unwrap_or_default();
        // The run's steps, where known (a log counted in epochs may state none).
        let (of_steps, advised) = match total {
            Some(t) => (
                format!("its {t} steps"),
                format!(" (~{} steps)", (0.03 * t as f64).round()),
            ),
            None => ("the run".to_string(), String::new()),
        };
        let over = if share >= 1.0 {
            "the run ends inside its LR warmup, which never reaches its peak".to_string()
        } else {
            format!(
                "the run warms its LR up over {:.0} % of {of_steps}",
                100.0 * share
            )
        };
        let rec = format!(
            "{over} ({}{epochs}; the LR's course is not logged): shorten the warmup to 2-5 % of \
             the run{advised}, then cosine-decay to 0.1x peak",
            quoted(s)
        );
        let mut f = Finding::new(Label::LrWarmupTooLong, Severity::Warning, first.step, rec)
            .with("warmup_fraction", share);
        if let Some(t) = total {
            f = f.with("total_steps", t as f64);
        }
        f.detail = Some(Detail::Setting(s.clone()));
        out.push(f);
    }
    out
}
