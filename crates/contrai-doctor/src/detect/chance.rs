//! `stuck_at_chance`: the model predicts no better than uniform guessing. Seen either on the
//! main loss (it sits at ln K and never improves) or on validation (its loss stays within a few
//! per cent of ln K and its accuracy near 1/K for the whole run, whatever the training loss does:
//! a model that learns nothing that generalises).

use super::{Ctx, finite, rel_drop};
use crate::finding::{Finding, Label, Severity};
use crate::series::{Point, Series, Task};
use crate::stats::{block_medians, median};

/// Validation evaluations needed to call a whole run stuck on validation; one fewer when a
/// validation accuracy at 1/K at every one of them confirms the loss.
const MIN_VAL_EVALS: usize = 4;
/// How far (relative) from 1/K the validation accuracy's later half may lie when it alone
/// tells a run stuck on validation (or anywhere below it, with K known: a model that does
/// worse than guessing has learned nothing either).
const ACCURACY_AT_CHANCE: f64 = 0.2;
/// How far (relative) from ln K every validation loss may lie on a run stuck on validation.
const VAL_TOLERANCE: f64 = 0.05;

/// Reviews the main loss, then validation, then whether the loss fell back to chance.
pub fn check(ctx: &Ctx, loss: Series) -> Option<Finding> {
    on_main_loss(ctx, loss)
        .or_else(|| on_validation(ctx))
        .or_else(|| collapsed(ctx, loss))
}

/// The share of the run a collapse must last (at its end).
const COLLAPSE_SHARE: f64 = 0.25;
/// A collapsed loss sits between the entropy of a skewed prior and a little above ln K: a
/// model that predicts the classes' frequencies (a 70/30 split: 0.61 = 0.88 ln 2) has learned
/// nothing of its inputs.
const PRIOR_BAND: (f64, f64) = (0.85, 1.05);
/// Before it collapsed, the loss was this far under its later level at least (it had learned).
const LEARNED_BELOW: f64 = 0.8;

/// A classifier that learned and then fell back to chance for the last [`COLLAPSE_SHARE`] of
/// the run at least: its loss there flat (its fitted change within twice its standard error, or
/// under 2 %) in [`PRIOR_BAND`] of ln K, after a stretch [`LEARNED_BELOW`] that level.
fn collapsed(ctx: &Ctx, loss: Series) -> Option<Finding> {
    let pts = finite(ctx.st.points(loss));
    let (first, last) = (pts.first()?.step as f64, pts.last()?.step as f64);
    let from = last - COLLAPSE_SHARE * (last - first);
    let tail: Vec<Point> = pts.iter().copied().filter(|p| p.step as f64 >= from).collect();
    let head: Vec<f64> = pts
        .iter()
        .filter(|p| (p.step as f64) < from)
        .map(|p| p.value)
        .collect();
    if tail.len() < 8 || head.len() < 8 || tail.iter().any(|p| p.value <= 0.0) {
        return None;
    }
    let level = super::level(&tail)?;
    let classes = ctx.st.hints.num_classes.filter(|k| *k >= 2).map(f64::from)?;
    if ctx.st.hints.task == Task::LanguageModel {
        return None;
    }
    let chance = classes.ln();
    let (lo, hi) = PRIOR_BAND;
    if !(lo * chance..=hi * chance).contains(&level) {
        return None;
    }
    let blocks = crate::stats::block_medians(&head, 8);
    let learned = blocks.iter().copied().fold(f64::INFINITY, f64::min);
    if learned > LEARNED_BELOW * level {
        return None;
    }
    let (change, se) = super::fitted_change(&tail, f64::ln)?;
    if change.abs() > (2.0 * se).max(0.02) {
        return None;
    }
    let mut f = finding(
        tail[0].step,
        loss,
        level,
        classes,
        (level - chance).abs() / chance,
    );
    f.recommendation = format!(
        "the model had learned (the {} was {} before) and fell back to chance from step {}: a \
         diverged update (a spike, an LR too high for its phase) left it predicting the classes' \
         frequencies; resume from a checkpoint before the fall with the peak LR x 0.3 and the \
         gradient norm clipped at 1.0. {}",
        loss.name(),
        super::num(learned),
        tail[0].step,
        f.recommendation
    );
    Some(f.with("level_before", learned))
}

/// The main loss sits at ln K for the whole run: it ends there, no stretch of it lay clearly
/// below, and it never fell from its start — or, where accuracy is logged and sits at 1/K at the
/// end, it fell only from above (an untrained head is worse than uniform).
fn on_main_loss(ctx: &Ctx, loss: Series) -> Option<Finding> {
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
    let lowest = block_medians(&vals, 5).into_iter().fold(f64::INFINITY, f64::min);
    if end <= 0.0 || rel_drop(end, lowest) > 0.02 {
        return None;
    }
    let fell = rel_drop(start, end) > 0.02 || rel_drop(initial, min) > 0.05;
    let accuracy = accuracy_beside(ctx, Series::TrainAccuracy, loss);
    let classes = classes(ctx, end).or_else(|| dead_output(ctx, &vals))?;
    let chance = classes.ln();
    let dist = (end - chance).abs() / chance;
    let late = tail_median(&accuracy, (accuracy.len() / 5).max(1));
    if dist > ctx.cfg.chance_tolerance || late.is_some_and(|a| a > 1.5 / classes) {
        return None;
    }
    // A loss that fell came down to ln K from above only where accuracy says it guesses: the
    // training accuracy's tail, or the run's last accuracy at 1/K with the loss's whole later
    // half settled at ln K (an early rise at a too-high LR, then chance for good).
    let settled = block_medians(&vals[vals.len() / 2..], 5)
        .iter()
        .all(|v| (v - chance).abs() <= ctx.cfg.chance_tolerance * chance);
    if fell && accuracy.len() < 10 && !(settled && last_accuracy_at_chance(ctx, classes)) {
        return None;
    }
    Some(finding(pts[0].step, loss, end, classes, dist))
}

/// Every validation loss of the run's later half within [`VAL_TOLERANCE`] of ln K (the early
/// ones may come down to it from above: an untrained head is worse than uniform), and validation
/// accuracy (when logged) never clearly above 1/K. Or a validation accuracy at 1/K (its later
/// half's median; no point clearly above) while the loss never lay clearly under ln K: a model
/// that memorises its training set grows confident on validation, its loss drifting above ln K
/// while it still guesses.
fn on_validation(ctx: &Ctx) -> Option<Finding> {
    let pts: Vec<Point> = finite(ctx.st.points(Series::ValLoss));
    let acc = finite(ctx.st.points(Series::ValAccuracy));
    let accuracy = acc.len();
    let needed = if accuracy >= pts.len() {
        MIN_VAL_EVALS - 1
    } else {
        MIN_VAL_EVALS
    };
    if pts.len() < needed || !long_enough(ctx, &pts) {
        return None;
    }
    let vals: Vec<f64> = pts[pts.len() / 2..].iter().map(|p| p.value).collect();
    let level = median(&vals)?;
    let dist_of = |chance: f64| {
        vals.iter()
            .map(|v| (v - chance).abs() / chance)
            .fold(0.0, f64::max)
    };
    // A validation loss at exactly ln K at every evaluation is a dead output, whatever the task.
    let all: Vec<f64> = pts.iter().map(|p| p.value).collect();
    if let Some(classes) = classes(ctx, level).or_else(|| dead_output(ctx, &all))
        && let dist = dist_of(classes.ln())
        && dist <= VAL_TOLERANCE
        && !accuracy_above_chance(ctx, Series::ValAccuracy, classes, true)
    {
        return Some(finding(pts[0].step, Series::ValLoss, level, classes, dist));
    }
    // The accuracy's evidence: K from the loss's lowest point (before any drift up).
    let lowest = pts.iter().map(|p| p.value).fold(f64::INFINITY, f64::min);
    let classes = classes(ctx, lowest)?;
    let late = tail_median(&acc, accuracy - accuracy / 2);
    let guesses = accuracy >= needed
        && late.is_some_and(|a| {
            // Below 1/K only where K is known: a K read off the loss's level can be one too few.
            let known = ctx.st.hints.num_classes.is_some();
            (a * classes - 1.0).abs() <= ACCURACY_AT_CHANCE || (known && a * classes < 1.0)
        })
        && !accuracy_above_chance(ctx, Series::ValAccuracy, classes, true);
    (guesses && lowest >= (1.0 - VAL_TOLERANCE) * classes.ln()).then(|| {
        finding(
            pts[0].step,
            Series::ValLoss,
            level,
            classes,
            dist_of(classes.ln()),
        )
    })
}

/// The finite points of an accuracy series but those logged where `loss` was not finite: the
/// model is broken there, not guessing.
fn accuracy_beside(ctx: &Ctx, accuracy: Series, loss: Series) -> Vec<Point> {
    let broken: std::collections::HashSet<u64> = ctx
        .st
        .points(loss)
        .iter()
        .filter(|p| !p.value.is_finite())
        .map(|p| p.step)
        .collect();
    finite(ctx.st.points(accuracy))
        .into_iter()
        .filter(|p| !broken.contains(&p.step))
        .collect()
}

/// The median value of the last `n` points (all of them when fewer); `None` when there are none.
fn tail_median(points: &[Point], n: usize) -> Option<f64> {
    super::level(&points[points.len().saturating_sub(n)..])
}

/// The evaluations span the patience ([`Ctx::patience`]; or, a short run, three times
/// the patience in evaluations) and, when the run's length is known, reach half of it: a run's
/// first evaluations at chance are no verdict on the run.
fn long_enough(ctx: &Ctx, pts: &[Point]) -> bool {
    let (first, last) = (pts[0].step as f64, pts[pts.len() - 1].step as f64);
    let patience = ctx.patience();
    let many = pts.len() >= 3 * ctx.cfg.patience_evals;
    let half = ctx.st.hints.total_steps.map_or(0.0, |t| t as f64 / 2.0);
    (last - first >= patience || many) && last >= half
}

/// K: the run's class count when known, else, for a run known to classify (its files or its
/// accuracy say so), the one whose ln K the loss sits at. A language model has none (its token
/// loss near ln 5 is no chance level), nor a run nothing shows to classify.
fn classes(ctx: &Ctx, level: f64) -> Option<f64> {
    let hints = &ctx.st.hints;
    let k = match (hints.task, hints.num_classes) {
        (Task::LanguageModel, _) => return None,
        (_, Some(c)) if c >= 2 => c as f64,
        _ if level > 0.0 && classifies(ctx, hints.task) => level.exp().round(),
        _ => return None,
    };
    (2.0..=1000.0).contains(&k).then_some(k)
}

/// How close (relative) to ln K every point of a dead output's loss lies.
const DEAD_OUTPUT: f64 = 1e-4;

/// K for a loss that equals ln K at every point (to [`DEAD_OUTPUT`]), K from 2 to 100, in a run
/// not known to model language: only exactly uniform predictions give exactly ln K, whatever
/// the task's files say (none, often); a loss that never moves from it is a dead output layer.
fn dead_output(ctx: &Ctx, vals: &[f64]) -> Option<f64> {
    if ctx.st.hints.task == Task::LanguageModel {
        return None;
    }
    let k = median(vals)?.exp().round();
    let at = |v: &f64| (v - k.ln()).abs() <= DEAD_OUTPUT * k.ln();
    ((2.0..=100.0).contains(&k) && vals.iter().all(at)).then_some(k)
}

/// Whether the last accuracy the run logged (training's, else validation's) lies at 1/K (within
/// [`ACCURACY_AT_CHANCE`]): a second, independent measure of guessing beside the loss at ln K.
fn last_accuracy_at_chance(ctx: &Ctx, classes: f64) -> bool {
    [Series::TrainAccuracy, Series::ValAccuracy]
        .iter()
        .filter_map(|s| finite(ctx.st.points(*s)).last().copied())
        .next()
        .is_some_and(|a| (a.value * classes - 1.0).abs() <= ACCURACY_AT_CHANCE)
}

/// Whether the run is known to classify: its files say so, or it logs accuracy.
fn classifies(ctx: &Ctx, task: Task) -> bool {
    task == Task::Classification
        || [Series::TrainAccuracy, Series::ValAccuracy]
            .iter()
            .any(|s| !ctx.st.points(*s).is_empty())
}

/// Whether the accuracy series (the last point, or any point when `whole`) lies clearly above
/// 1/K (1.5/K); false when it is not logged.
fn accuracy_above_chance(ctx: &Ctx, series: Series, classes: f64, whole: bool) -> bool {
    let acc = finite(ctx.st.points(series));
    let above = |p: &Point| p.value > 1.5 / classes;
    match whole {
        true => acc.iter().any(above),
        false => acc.last().is_some_and(above),
    }
}

fn finding(step: u64, loss: Series, level: f64, classes: f64, dist: f64) -> Finding {
    let chance = classes.ln();
    let rec = format!(
        "the {} stays at ln {classes} = {chance:.3} (uniform guessing over {classes} classes): \
         check that labels match inputs and the loss gets logits; overfit one batch of 32 \
         first (loss must fall > 90 %), then try the LR x 0.1 and x 10",
        loss.name()
    );
    Finding::new(Label::StuckAtChance, Severity::Critical, step, rec)
        .with("loss_level", level)
        .with("ln_k", chance)
        .with("classes", classes)
        .with("relative_distance", dist)
}
