//! `plateau`: the smoothed loss improved by less than a small fraction over the recent part of
//! the run while the learning rate was not being annealed — unless the run converged (the
//! validation loss flat at its best after the loss fell by more than half); or it stalled for a
//! quarter of the run until one sudden drop (an LR cut) did several times what the whole stall
//! did; or its second epoch was no better than its first.

use super::{Ctx, finite, fitted_change, level, num};
use crate::finding::{Finding, Label, Severity};
use crate::series::{Point, Series, XUnit};
use crate::stats::{block_medians, median, robust_sigma, theil_sen_change};

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
    let (xs, ys) = blocked(win, 32, |v| if positive { v.ln() } else { v });
    // The change over the recent window (the last 40 % of the run seen so far).
    let span = xs.last()? - xs.first()?;
    // A plateau must last at least the patience.
    if span < ctx.patience() {
        return None;
    }
    let (change, se) = theil_sen_change(&xs, &ys)?;
    let level = if positive { 1.0 } else { median(&ys)?.abs() };
    // A loss whose level is 0 (a signed RL surrogate, a loss at its floor) has no relative
    // change to judge: it is at no level a run should get below.
    if level == 0.0 {
        return None;
    }
    let se = se / level;
    let rel = if positive {
        change.exp() - 1.0
    } else {
        change / level
    };
    Some((rel, se, win[0].step, w))
}

/// The points' steps and `value(point)`s as at most `blocks` block medians each: Theil–Sen over
/// them stays at <= blocks² / 2 pairs whatever the log's length (32: 496).
fn blocked(points: &[Point], blocks: usize, value: impl Fn(f64) -> f64) -> (Vec<f64>, Vec<f64>) {
    let xs: Vec<f64> = points.iter().map(|p| p.step as f64).collect();
    let ys: Vec<f64> = points.iter().map(|p| value(p.value)).collect();
    (block_medians(&xs, blocks), block_medians(&ys, blocks))
}

/// True when the LR is being annealed over the steps from `from` (or, with no LR logged, the
/// run's files name a decaying schedule): a falling schedule explains a flattening loss
/// (convergence), so it is not a plateau to act on.
pub(crate) fn lr_annealing(ctx: &Ctx, from: u64) -> bool {
    // No LR logged: the schedule the run's files state, when they state one.
    if ctx.st.points(Series::Lr).is_empty() {
        let schedule = ctx.st.hints.setup.schedule;
        return schedule.and_then(crate::stated_setup::LrSchedule::decays) == Some(true);
    }
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

/// A sudden drop: the loss falls by this factor between two neighbouring stretches of logs...
const SUDDEN_DROP: f64 = 0.85;
/// ...after a stall of at least this share of the run...
const STALL_SHARE: f64 = 0.25;
/// ...that gained less than this share of what the drop did and less than [`STALL_MAX`].
const STALL_GAIN: f64 = 1.0 / 3.0;
/// The most a stall may improve (relative).
const STALL_MAX: f64 = 0.05;
/// The least a second epoch improves on the first (relative) in a run that still learns.
const EPOCH_GAIN: f64 = 0.05;

/// How well (2 standard errors, relative) a window's change must be known to call it flat.
const FLAT_WITHIN: f64 = 0.10;

/// Reviews the main loss; `final_` at the run's end.
pub fn check(ctx: &Ctx, loss: Series, final_: bool) -> Option<Finding> {
    uniform_over_vocabulary(ctx, loss, final_)
        .or_else(|| frozen_validation(ctx))
        .or_else(|| frozen_from_the_start(ctx, loss))
        .or_else(|| predictions_never_changed(ctx))
        .or_else(|| final_.then(|| validation_never_improved(ctx)).flatten())
        .or_else(|| predictions_frozen_at_first(ctx))
        .or_else(|| recent(ctx, loss))
        .or_else(|| never_moved(ctx, loss))
        .or_else(|| stalled_until_a_drop(ctx, loss))
        .or_else(|| second_epoch_no_better(ctx, loss))
}

/// How close (relative) to ln V every loss of a language model at uniform lies.
const AT_UNIFORM: f64 = 0.01;
/// The fewest logs that show it (a short run logged at the Trainer's default every 500 steps).
const UNIFORM_LOGS: usize = 3;

/// A language model whose loss lies at ln V (its config's vocabulary, to [`AT_UNIFORM`]) at
/// every one of its logs, at least [`UNIFORM_LOGS`], for the patience or a whole run: a uniform
/// guess over its tokens — even the tokens' frequencies would take it far under ln V — so
/// nothing is learned. Early logs of a model from scratch sit there too: the patience tells.
fn uniform_over_vocabulary(ctx: &Ctx, loss: Series, final_: bool) -> Option<Finding> {
    let v = ctx.st.hints.vocab_size? as f64;
    let pts = finite(ctx.st.points(loss));
    let (first, last) = (pts.first()?.step, pts.last()?.step);
    let uniform = v.ln();
    let long = final_ || (last - first) as f64 >= ctx.patience();
    if pts.len() < UNIFORM_LOGS
        || !long
        || pts
            .iter()
            .any(|p| (p.value - uniform).abs() > AT_UNIFORM * uniform)
    {
        return None;
    }
    let rec = format!(
        "the {} stays at ln {v} = {uniform:.3} at every one of its {} logs (steps {first}-{last}): \
         a uniform guess over the model's {v} tokens, nothing learned — check that the labels \
         are the inputs (not all masked to -100), that the LR is not 0 and that the weights \
         trained are the ones the loss is computed with",
        loss.name(),
        pts.len()
    );
    Some(
        Finding::new(Label::Plateau, Severity::Critical, first, rec)
            .with("vocab_size", v)
            .with("ln_vocab", uniform),
    )
}

/// Evaluations a frozen validation loss must span...
const FROZEN_EVALS: usize = 5;
/// ...and the share of the run they must cover.
const FROZEN_SHARE: f64 = 0.25;
/// How close (relative) to the last every frozen validation loss lies.
const FROZEN: f64 = 1e-6;

/// The validation loss the same, to [`FROZEN`], at its last [`FROZEN_EVALS`] evaluations or
/// more, over [`FROZEN_SHARE`] of the run at least, with the LR still above 1 % of its peak: a model
/// that learns changes its predictions, and a continuous loss shows it in its last digits. A
/// collapsed model (a constant output) or an evaluation of weights that never change gives
/// this picture.
fn frozen_validation(ctx: &Ctx) -> Option<Finding> {
    let val = finite(ctx.st.points(Series::ValLoss));
    let end = *val.last()?;
    let same = |p: &Point| end.value != 0.0 && (p.value - end.value).abs() <= FROZEN * end.value.abs();
    let n = val.iter().rev().take_while(|p| same(p)).count();
    let from = val[val.len() - n.max(1)];
    let span = (end.step - val[0].step).max(1) as f64;
    // Weights that barely move (an LR annealed to under 1 % of its peak) may leave a loss
    // the same in its last digits: that is the schedule's end, not a collapse.
    let lr_stopped = ctx
        .peak_lr()
        .zip(lr_at(ctx, from.step))
        .is_some_and(|(peak, lr)| lr < 0.01 * peak);
    if n < FROZEN_EVALS || ((end.step - from.step) as f64) < FROZEN_SHARE * span || lr_stopped {
        return None;
    }
    let whole = if n == val.len() {
        format!("at every one of its {n} evaluations")
    } else {
        format!("at each of its last {n} evaluations")
    };
    let rec = format!(
        "the validation loss is {} {whole} (steps {}-{}): the model's predictions do not \
         change. A collapsed model (one output for every input: check the inputs' and targets' \
         scaling, and lower the peak LR x 0.1 if units died) or an evaluation of weights that \
         do not train (check that the optimizer holds the evaluated model's parameters)",
        num(end.value),
        from.step,
        end.step
    );
    Some(
        Finding::new(Label::Plateau, Severity::Critical, from.step, rec)
            .with("frozen_val_loss", end.value)
            .with("evaluations", n as f64)
            .with("window_start_step", from.step as f64)
            .with("window_end_step", end.step as f64),
    )
}

/// Logs a loss frozen from its first must span.
const FROZEN_LOGS: usize = 10;

/// The training loss one value (to [`FROZEN`]; zero included) at every one of its logs, at
/// least [`FROZEN_LOGS`], with the LR above 1 % of its peak: a minibatch loss that learns, or
/// even one that does not, moves from batch to batch — one that never moved from its first log
/// has no gradient behind it (every label masked, a loss scaled to zero, nothing trainable). A
/// loss that settled at a rounded 0 after falling is no such run: it moved first.
fn frozen_from_the_start(ctx: &Ctx, loss: Series) -> Option<Finding> {
    // Every log, a non-finite one included: a NaN is no frozen value (`nonfinite` says it).
    let pts = ctx.st.points(loss);
    let (first, end) = (*pts.first()?, *pts.last()?);
    let same = |p: &Point| (p.value - first.value).abs() <= FROZEN * first.value.abs();
    let lr_stopped = ctx
        .peak_lr()
        .zip(lr_at(ctx, first.step))
        .is_some_and(|(peak, lr)| lr < 0.01 * peak || peak <= 0.0);
    // A gradient norm logged non-finite explains a frozen loss: fp16's scaler skipped every
    // step, and `nonfinite` says so.
    let grad_nonfinite = ctx
        .st
        .points(Series::GradNorm)
        .iter()
        .any(|p| !p.value.is_finite());
    if pts.len() < FROZEN_LOGS || !pts.iter().all(same) || lr_stopped || grad_nonfinite {
        return None;
    }
    let rec = format!(
        "{} is {} at every one of its {} logs (steps {}-{}): no gradient reaches the weights, \
         and the run trains nothing. Check that the labels are not all masked (-100: a prompt \
         mask or a truncation that cuts every answer), that the model has trainable parameters \
         and the optimizer holds them, and that fp16 loss scaling does not zero the loss (train \
         in bf16 or fp32 to see)",
        loss.name(),
        num(first.value),
        pts.len(),
        first.step,
        end.step
    );
    Some(
        Finding::new(Label::Plateau, Severity::Critical, first.step, rec)
            .with("frozen_loss", first.value)
            .with("logs", pts.len() as f64)
            .with("window_start_step", first.step as f64)
            .with("window_end_step", end.step as f64),
    )
}

/// How many of `points`, from the first, have the first's value (to [`FROZEN`]).
fn frozen_prefix(points: &[Point]) -> usize {
    let Some(first) = points.first() else {
        return 0;
    };
    let same = |p: &&Point| (p.value - first.value).abs() <= FROZEN * first.value.abs().max(1e-12);
    points.iter().take_while(same).count()
}

/// The validation accuracy the same, to [`FROZEN`], at every one of its evaluations (at least
/// [`FROZEN_EVALS`]) while the training loss fell by more than half, or while the validation loss
/// never went below its first evaluation: the model trained, but its predictions on validation
/// never changed from its first evaluation — one class for every input (a segmentation's
/// background, a classifier's majority class).
fn predictions_never_changed(ctx: &Ctx) -> Option<Finding> {
    let acc = finite(ctx.st.points(Series::ValAccuracy));
    let first = *acc.first()?;
    if acc.len() < FROZEN_EVALS || frozen_prefix(&acc) < acc.len() {
        return None;
    }
    let train = finite(ctx.st.points(Series::TrainLoss));
    let (start, end) = (train.first()?.value, train.last()?.value);
    // The model learned its training set (its loss fell by half), or nothing it learned
    // reached validation (the validation loss never went below its first evaluation).
    let val = finite(ctx.st.points(Series::ValLoss));
    let val_never_improved = val.len() >= FROZEN_EVALS && val.iter().all(|p| p.value >= val[0].value);
    if !(start > 0.0 && (end < 0.5 * start || val_never_improved)) {
        return None;
    }
    let rec = format!(
        "the validation accuracy is {} at every one of its {} evaluations (steps {}-{}) while the \
         training loss fell from {} to {}: the model's predictions on validation never changed — one \
         class for every input (the majority class, a segmentation's background). Weight the \
         classes (or use a Dice / focal loss), check the targets' encoding, and lower the peak LR \
         x 0.1 if the model collapsed early",
        num(first.value),
        acc.len(),
        first.step,
        acc.last()?.step,
        num(start),
        num(end)
    );
    Some(
        Finding::new(Label::Plateau, Severity::Critical, first.step, rec)
            .with("frozen_val_accuracy", first.value)
            .with("evaluations", acc.len() as f64)
            .with("train_loss_first", start)
            .with("train_loss_last", end),
    )
}

/// Evaluations a whole run's validation loss must span to show it never improved.
const NEVER_EVALS: usize = 10;
/// Training logs whose median is the training loss's first (and last) level.
const LEVEL_LOGS: usize = 5;
/// The least fall (in log units, about 5 %: the vocabulary's material change) over a half of
/// the run that is an improvement, however well a long noisy run knows a smaller one.
const MATERIAL_GAIN: f64 = 0.05;

/// The validation loss never improved over a whole run of [`NEVER_EVALS`] evaluations or more —
/// over each half of the run, its line falling less than [`MATERIAL_GAIN`] or twice its error
/// and rising no more than twice its error (a first half that fell learned; a second that rose
/// overfits) — while the training loss fell by more than half, and never came below where the
/// training loss began: the model fitted its training set and nothing of it reached validation
/// (a shifted split, features that do not carry over). A fine-tune whose validation was already
/// low at its first evaluation learned before it.
fn validation_never_improved(ctx: &Ctx) -> Option<Finding> {
    let val = finite(ctx.st.points(Series::ValLoss));
    let train = finite(ctx.st.points(Series::TrainLoss));
    if val.len() < NEVER_EVALS || train.len() < LEVEL_LOGS || val.iter().any(|p| p.value <= 0.0) {
        return None;
    }
    let (train_first, train_last) = (
        level(&train[..LEVEL_LOGS])?,
        level(&train[train.len() - LEVEL_LOGS..])?,
    );
    let lowest = val.iter().map(|p| p.value).fold(f64::INFINITY, f64::min);
    let level_half = |half: &[Point]| {
        let (xs, ys) = blocked(half, 32, f64::ln);
        theil_sen_change(&xs, &ys)
            .is_some_and(|(change, se)| change <= 2.0 * se && -change <= (2.0 * se).max(MATERIAL_GAIN))
    };
    let (first_half, second_half) = val.split_at(val.len() / 2);
    if !(level_half(first_half) && level_half(second_half))
        || train_last >= 0.5 * train_first
        || lowest < train_first
    {
        return None;
    }
    let rec = format!(
        "the validation loss never improved over its {} evaluations (steps {}-{}; never below \
         {}, where the training loss began) while the training loss fell from {} to {}: nothing \
         the model fits carries to validation. Check that the validation split comes from the \
         same distribution (a time-ordered split, targets on another scale: normalise targets \
         and features with the training split's statistics) and is preprocessed as the \
         training inputs are; then regularise (dropout, weight decay) or shrink the model",
        val.len(),
        val[0].step,
        val[val.len() - 1].step,
        num(train_first),
        num(train_first),
        num(train_last)
    );
    Some(
        Finding::new(Label::Plateau, Severity::Warning, val[0].step, rec)
            .with("val_loss_lowest", lowest)
            .with("train_loss_first", train_first)
            .with("train_loss_last", train_last)
            .with("evaluations", val.len() as f64),
    )
}

/// The validation accuracy the same, to [`FROZEN`], at its first [`FROZEN_EVALS`] evaluations or
/// more, over [`STALL_SHARE`] of the run at least, before it moved: the model predicted one class
/// for every input that long before it learned more (a continuous loss repeats no value; an
/// accuracy does only while the predictions do not change).
fn predictions_frozen_at_first(ctx: &Ctx) -> Option<Finding> {
    let acc = finite(ctx.st.points(Series::ValAccuracy));
    let first = *acc.first()?;
    let n = frozen_prefix(&acc);
    let until = acc[n.saturating_sub(1)];
    let span = (ctx.st.last_step().saturating_sub(first.step)).max(1) as f64;
    // Every input right from the first evaluation on is no stall, however long it lasts.
    let perfect = first.value >= 1.0;
    if n < FROZEN_EVALS
        || n == acc.len()
        || ((until.step - first.step) as f64) < STALL_SHARE * span
        || perfect
    {
        return None;
    }
    let rec = format!(
        "the validation accuracy is {} at each of its first {n} evaluations (steps {}-{}) before \
         it moved: the model predicted one class for every input that long (the majority class). \
         Weight the classes (or use a focal loss), check the inputs' scaling, and warm the LR up \
         over 3 % of the steps to a peak that moves the model sooner",
        num(first.value),
        first.step,
        until.step
    );
    Some(
        Finding::new(Label::Plateau, Severity::Warning, first.step, rec)
            .with("frozen_val_accuracy", first.value)
            .with("evaluations", n as f64)
            .with("window_start_step", first.step as f64)
            .with("window_end_step", until.step as f64),
    )
}

/// A second pass over the same data must show: the training loss's median over the second
/// epoch [`EPOCH_GAIN`] below the first's, in a log whose steps count epochs. A model that
/// learns fits data it has seen (a fine-tune steps down at each new epoch); one that does not
/// has stopped learning, whatever the LR schedule does meanwhile — unless it learned within its
/// first epoch ([`fell_within`]): a loss that fell and then settled converged early, and a stall
/// after learning is [`recent`]'s to judge, with the LR schedule in view.
fn second_epoch_no_better(ctx: &Ctx, loss: Series) -> Option<Finding> {
    let spe = ctx.st.hints.steps_per_epoch.filter(|s| *s >= 5.0)?;
    let pts = finite(ctx.st.points(Series::TrainLoss));
    if loss != Series::TrainLoss || (pts.last()?.step as f64) < 1.95 * spe {
        return None;
    }
    let epoch = |k: f64| -> Vec<f64> {
        let (from, to) = (k * spe, (k + 1.0) * spe);
        pts.iter()
            .filter(|p| (from..to).contains(&(p.step as f64)))
            .map(|p| p.value)
            .collect()
    };
    let (first, second) = (epoch(0.0), epoch(1.0));
    if first.len() < 5 || second.len() < 5 {
        return None;
    }
    let (m1, m2) = (median(&first)?, median(&second)?);
    let gain = 1.0 - m2 / m1;
    if m1 <= 0.0
        || m2 <= 0.0
        || gain + 2.0 * gain_error(&first, &second) >= EPOCH_GAIN
        || still_falls(&pts, spe)
        || fell_within(&first)
    {
        return None;
    }
    let (from, to) = (spe.round() as u64, (2.0 * spe).round() as u64);
    let rec = format!(
        "{} over the second epoch (steps {from}-{to}, median {}) is only {:.1} % below the \
         first's ({}): a second pass over the same data taught the model next to nothing. Raise \
         the peak LR x 3 (a LoRA's usual range is 1e-4 to 3e-4), give the model more capacity \
         (a LoRA's rank or target modules), check that the labels reach the loss (masking, \
         padding), or stop after one epoch",
        loss.name(),
        num(m2),
        100.0 * gain,
        num(m1)
    );
    Some(
        Finding::new(Label::Plateau, Severity::Warning, from, rec)
            .with("first_epoch_median", m1)
            .with("second_epoch_median", m2)
            .with("epoch_gain", gain)
            .with("steps_per_epoch", spe),
    )
}

/// The standard error of the relative gain between two epochs' medians, from each epoch's
/// robust spread: "no better" must be known, not read off two medians of a few scattered losses.
fn gain_error(first: &[f64], second: &[f64]) -> f64 {
    let relative_error = |v: &[f64]| {
        let m = median(v).unwrap_or(0.0);
        // A median's standard error is ~1.25 sigma / sqrt(n).
        1.253 * robust_sigma(v, m) / (v.len() as f64).sqrt() / m.abs().max(1e-12)
    };
    relative_error(first).hypot(relative_error(second))
}

/// Whether an epoch's losses fell within it: its last quarter's median [`EPOCH_GAIN`] below its
/// first quarter's, by more than twice the gain's error.
fn fell_within(epoch: &[f64]) -> bool {
    let q = epoch.len() / 4;
    if q < 5 {
        return false;
    }
    let (start, end) = (&epoch[..q], &epoch[epoch.len() - q..]);
    let (Some(a), Some(b)) = (median(start), median(end)) else {
        return false;
    };
    a > 0.0 && 1.0 - b / a - 2.0 * gain_error(start, end) >= EPOCH_GAIN
}

/// Whether the training loss still falls over the second epoch, along its robust line by more
/// than twice that line's error: a model still learning, slowly (a large fine-tune whose loss
/// declines over tens of thousands of steps shows no step at the epoch's turn).
fn still_falls(pts: &[Point], spe: f64) -> bool {
    let second = pts.iter().filter(|p| (spe..2.0 * spe).contains(&(p.step as f64)));
    fitted_change(second, |v| v).is_some_and(|(change, error)| change < -2.0 * error)
}

/// The recent window (the last [`DoctorConfig::plateau_window`] of the run) did not improve.
///
/// [`DoctorConfig::plateau_window`]: crate::DoctorConfig::plateau_window
fn recent(ctx: &Ctx, loss: Series) -> Option<Finding> {
    let (rel, se, start, w) = recent_change(ctx, loss)?;
    // Improvement is a negative change. A plateau: the improvement is tiny, or not
    // distinguishable from the curve's own noise (under two standard errors).
    let improvement = -rel;
    // The noise test needs enough points to estimate the noise (8).
    // Only a small improvement (under 10x the threshold) can be called noise.
    // Flatness must be shown, not assumed: a window too noisy to know its change within
    // [`FLAT_WITHIN`] (2 standard errors) says nothing either way.
    let bounded = 2.0 * se < FLAT_WITHIN;
    let noisy = w >= 8 && bounded && improvement < 2.0 * se && improvement < 10.0 * ctx.cfg.plateau_rel;
    if (improvement >= ctx.cfg.plateau_rel || !bounded) && !noisy {
        return None;
    }
    // A window that rose clearly because the loss jumped in it holds a spike, not a plateau.
    let rose = -improvement > 2.0 * se && -improvement > 10.0 * ctx.cfg.plateau_rel;
    if rose && super::spike::jumped(ctx, loss, start) {
        return None;
    }
    let annealing = lr_annealing(ctx, start);
    if annealing && !never_improved(ctx, loss) {
        return None;
    }
    if converged(ctx, loss, start) {
        return None;
    }
    let f = finding(ctx, loss, improvement, se, start, w);
    Some(if annealing { never_fell(f, loss, true) } else { f })
}

/// The loss never improved over its whole run, for at least the patience: [`never_improved`]
/// over its first half, and the whole run's fitted change within its noise too. A stall from the
/// first log is as long as the run, whatever the recent window [`recent`] reads (a run shorter
/// than 2.5 patiences has a recent window shorter than one).
fn never_moved(ctx: &Ctx, loss: Series) -> Option<Finding> {
    let pts = finite(ctx.st.points(loss));
    let (first, last) = (pts.first()?.step, pts.last()?.step);
    if pts.len() < 20 || ((last - first) as f64) < ctx.patience() || !never_improved(ctx, loss) {
        return None;
    }
    let (xs, ys) = blocked(&pts, 32, f64::ln);
    let (change, se) = theil_sen_change(&xs, &ys)?;
    let improvement = 1.0 - change.exp();
    if !flat(ctx, improvement, se, 1.0) {
        return None;
    }
    let f = finding(ctx, loss, improvement, se, first, pts.len());
    Some(never_fell(f, loss, lr_annealing(ctx, first)))
}

/// A fitted relative improvement over `share` of the run, known within [`FLAT_WITHIN`], that is
/// no learning: within its noise (two standard errors), or under the least a learning run gains
/// ([`DoctorConfig::plateau_rel`] a recent window, [`DoctorConfig::plateau_window`] of the run).
///
/// [`DoctorConfig::plateau_rel`]: crate::DoctorConfig::plateau_rel
/// [`DoctorConfig::plateau_window`]: crate::DoctorConfig::plateau_window
fn flat(ctx: &Ctx, improvement: f64, se: f64, share: f64) -> bool {
    let least = ctx.cfg.plateau_rel * share / ctx.cfg.plateau_window;
    2.0 * se < FLAT_WITHIN && (improvement < 2.0 * se || improvement < least)
}

/// The loss over the run's first half — its LR at or near its peak — improved by no more than
/// its own noise tells (two standard errors of its fitted change, known within
/// [`FLAT_WITHIN`]): a schedule's decay explains a loss that flattens after it fell, not one
/// that never fell while the LR was high. Unless the validation loss improved over the run
/// ([`validation_improved`]): a training loss too noisy to show it still learns.
fn never_improved(ctx: &Ctx, loss: Series) -> bool {
    let pts = finite(ctx.st.points(loss));
    let first = &pts[..pts.len() / 2];
    if first.len() < 10 || first.iter().any(|p| p.value <= 0.0) {
        return false;
    }
    let (xs, ys) = blocked(first, 32, f64::ln);
    theil_sen_change(&xs, &ys).is_some_and(|(change, se)| flat(ctx, 1.0 - change.exp(), se, 0.5))
        && !validation_improved(ctx)
}

/// The validation loss, evaluated at least [`FROZEN_EVALS`] times, improved over the run along
/// its fitted line by more than twice that line's error and by [`DoctorConfig::plateau_rel`]
/// at least: the model learned, whatever a noisy training loss shows.
///
/// [`DoctorConfig::plateau_rel`]: crate::DoctorConfig::plateau_rel
fn validation_improved(ctx: &Ctx) -> bool {
    let val = finite(ctx.st.points(Series::ValLoss));
    if val.len() < FROZEN_EVALS || val.iter().any(|p| p.value <= 0.0) {
        return false;
    }
    let (xs, ys) = blocked(&val, 32, f64::ln);
    theil_sen_change(&xs, &ys)
        .is_some_and(|(change, se)| change < -2.0 * se && 1.0 - change.exp() >= ctx.cfg.plateau_rel)
}

/// A flat tail is convergence when the validation loss, evaluated at least 3 times in it, stays
/// within 2 % of its best with the last evaluation there, after the loss fell by more than
/// half: the model generalises as well as it has, and nothing says more steps would help.
fn converged(ctx: &Ctx, loss: Series, start: u64) -> bool {
    let val = finite(ctx.st.points(Series::ValLoss));
    let train = finite(ctx.st.points(loss));
    let in_tail: Vec<f64> = val.iter().filter(|p| p.step >= start).map(|p| p.value).collect();
    let best = val.iter().map(|p| p.value).fold(f64::INFINITY, f64::min);
    let head: Vec<f64> = train
        .iter()
        .take((train.len() / 20).clamp(3, 5))
        .map(|p| p.value)
        .collect();
    let tail: Vec<f64> = train
        .iter()
        .filter(|p| p.step >= start)
        .map(|p| p.value)
        .collect();
    let (Some(first), Some(level)) = (median(&head), median(&tail)) else {
        return false;
    };
    loss == Series::TrainLoss
        && in_tail.len() >= 3
        && best > 0.0
        && in_tail.iter().all(|v| *v <= 1.02 * best)
        && level < 0.5 * first
}

/// The loss stalled for at least [`STALL_SHARE`] of the run, gaining less than
/// [`STALL_GAIN`] of what the fall after it did ([`SUDDEN_DROP`] at least, within the stall's
/// own length): an LR cut came late, or the run sat on a saddle it escaped only late (a stall
/// during a warmup, the LR rising through it, is the warmup's finding). The stall reported ends
/// where the fall begins.
fn stalled_until_a_drop(ctx: &Ctx, loss: Series) -> Option<Finding> {
    let pts = finite(ctx.st.points(loss));
    if loss != Series::TrainLoss || pts.len() < 30 || pts.iter().any(|p| p.value <= 0.0) {
        return None;
    }
    let (xs, ys) = blocked(&pts, 60, f64::ln);
    let m = ys.len();
    // A drop must stand out of the curve's own swing from block to block, and be material on
    // the loss's own scale (a logged 0.0002 -> 0.0001 at a loss that began at 1 is rounding).
    let swings: Vec<f64> = ys.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    let swing = median(&swings)?;
    let material = super::material(ctx, loss)?;
    let needed = STALL_SHARE * (xs[m - 1] - xs[0]);
    // A fall no LR cut explains is a new epoch's data in a log by the step; in a log of whole
    // epochs (each point an epoch's mean) it is the run escaping its stall.
    let by_epoch = ctx.st.hints.x_unit == XUnit::Epoch;
    // A stall ending at block j: its start i, what it gained, the fall after it and where that
    // fall bottomed out.
    let stall = |j: usize| -> Option<(usize, f64, f64, usize)> {
        let before = median(&ys[j - 3..j])?;
        let i = (0..j).rev().find(|&i| xs[j - 1] - xs[i] >= needed)?;
        // The way out: the lowest 3-block level reached within the stall's own length after it
        // (at once, as an LR cut does, or over a few blocks, as an escape from a saddle does).
        let (out, low) = (j..m.saturating_sub(2))
            .take_while(|&k| xs[k] - xs[j - 1] <= xs[j - 1] - xs[i])
            .filter_map(|k| Some((k, median(&ys[k..(k + 3).min(m)])?)))
            .reduce(|a, b| if b.1 < a.1 { b } else { a })?;
        let drop = before - low;
        // What the stall gained along its fitted line, known to within its standard error.
        let (change, se) = theil_sen_change(&xs[i..j], &ys[i..j])?;
        let gain = -change;
        let clear = drop >= -SUDDEN_DROP.ln()
            && drop >= 3.0 * swing
            && before.exp() * (1.0 - (-drop).exp()) >= material
            && gain + 2.0 * se < STALL_GAIN * drop
            && gain.abs() + 2.0 * se < -(1.0 - STALL_MAX).ln();
        let (from, to) = (xs[i] as u64, xs[j - 1] as u64);
        let lr_explains = lr_rose(ctx, from, to)
            || (!by_epoch && !lr_cut_or_unknown(ctx, to, xs[(out + 2).min(m - 1)] as u64));
        (clear && !lr_explains).then_some((i, gain, drop, out))
    };
    let first = (3.max(m / 4)..m.saturating_sub(2)).find(|&j| stall(j).is_some())?;
    // Of the stalls that end one after the other there, the one before the deepest fall: it
    // ends where the fall begins.
    let (j, (i, gain, drop, out)) = (first..m.saturating_sub(2))
        .map_while(|j| Some((j, stall(j)?)))
        .reduce(|a, b| if b.1.2 > a.1.2 { b } else { a })?;
    let (from, to, low) = (xs[i] as u64, xs[j - 1] as u64, xs[out] as u64);
    let improvement = 1.0 - (-gain).exp();
    let fell = if out <= j + 1 {
        "at once".to_string()
    } else {
        format!("by step {low}")
    };
    let rec = format!(
        "{} stalled from step {from} to {to} ({:.1} % better in {:.0} % of the run) until it fell \
         {:.0} % {fell} after step {to} (an LR cut, or a late escape): cut the LR x 0.3 when the \
         loss stops improving for 3 evaluations (ReduceLROnPlateau), or decay it from the start \
         (cosine with 3 % warmup); a loss stuck at its trivial level (predicting the mean) first \
         needs a check of inputs and targets",
        loss.name(),
        100.0 * improvement,
        100.0 * (to - from) as f64 / (xs[m - 1] - xs[0]).max(1.0),
        100.0 * (1.0 - (-drop).exp())
    );
    Some(
        Finding::new(Label::Plateau, Severity::Warning, from, rec)
            .with("stall_improvement", improvement)
            .with("window_start_step", from as f64)
            .with("window_end_step", to as f64)
            .with("drop_after", 1.0 - (-drop).exp()),
    )
}

/// The logged LR at `step` (the last one logged up to it).
fn lr_at(ctx: &Ctx, step: u64) -> Option<f64> {
    ctx.st
        .points(Series::Lr)
        .iter()
        .rfind(|p| p.step <= step && p.value.is_finite())
        .map(|p| p.value)
}

/// Whether the logged LR rose by half or more between `from` and `to`.
fn lr_rose(ctx: &Ctx, from: u64, to: u64) -> bool {
    matches!((lr_at(ctx, from), lr_at(ctx, to)), (Some(a), Some(b)) if b > 1.5 * a)
}

/// Whether the LR was cut between `from` and `to` (to under 0.7x), or is not logged: a drop
/// the logged LR does not explain is the data's (a new epoch of a fine-tune), no late cut.
fn lr_cut_or_unknown(ctx: &Ctx, from: u64, to: u64) -> bool {
    match (lr_at(ctx, from), lr_at(ctx, to)) {
        (Some(a), Some(b)) => b < 0.7 * a,
        _ => true,
    }
}

/// The plateau of a run whose loss never fell (while its LR decayed, when `annealing`): no LR
/// cut helps it.
fn never_fell(mut f: Finding, loss: Series, annealing: bool) -> Finding {
    let lr = if annealing {
        ", its LR at its peak and decaying since"
    } else {
        ""
    };
    f.recommendation = format!(
        "{} never improved from its first log{lr}: nothing this run's schedule did moved it. \
         Check that the weights train (trainable parameters > 0, adapters on the layers the task needs, the LR reaching them), that \
         the labels or loss mask cover what the model must learn, then raise the peak LR x 3 \
         (or the adapter rank); if the base model already fits this data, compare its \
         evaluation loss before training first",
        loss.name()
    );
    f.with("never_improved", 1.0)
}

/// The finding for a recent window that did not improve.
fn finding(ctx: &Ctx, loss: Series, improvement: f64, se: f64, start: u64, w: usize) -> Finding {
    let last = ctx.st.points(loss).last().map_or(start, |p| p.step);
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
    Finding::new(Label::Plateau, Severity::Warning, start, rec)
        .with("recent_improvement", improvement)
        .with("improvement_standard_error", se)
        .with("window_points", w as f64)
        .with("window_start_step", start as f64)
        .with("window_end_step", last as f64)
}
