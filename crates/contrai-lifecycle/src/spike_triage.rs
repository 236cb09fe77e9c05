//! Spike triage — what a loss spike makes the conductor do, and how it tells its cause.
//!
//! | seen at a finite training step | cause | the conductor |
//! | --- | --- | --- |
//! | a **spike** ([`judge`]): log loss ≥ `guards.spike_z` robust deviations above the window's median, or the loss ≥ `guards.spike_over_max` × the window's highest; either way ≥ `guards.spike_ratio` × its median — the first of the run | undetermined | `Record(rollback_spike)`, `Quarantine` (the batch's rows), `SkipBatches`; `Restore{Latest, Everything}`: the steps since the checkpoint are replayed, the batch skipped |
//! | a spike sharing rows with the **suspects** — rows of earlier spikes' batches not trained since without a spike — more than chance allows (a random batch would share as many less often than `guards.spike_chance`, [`attribute`]) | data | `Record(drop_spiking)`, `Quarantine` (the shared rows `left`), `DropSamples` (them and every row dropped before), `SkipBatches`; the same restore |
//! | a spike of other rows, after an earlier spike — or any later spike of an engine that reports no rows (it cannot tell a data cause) | optimisation | `Record(lr_cut_spike)`, LR × `guards.spike_lr_factor` from then on (kept through every later rollback), `Quarantine`, `SkipBatches`; the same restore |
//! | a spike after `guards.spike_retries` spike rollbacks | — | `Record(abort_spike)` with every spike's step, loss, cause and rows; `Fail(Diverged)` |
//! | a spike that the batch's length explains: the log loss against the log of the mean tokens a sample, fitted over the window (Theil–Sen), explains half its variance (residual spread ≤ 0.7 × the raw) and leaves a residual that is no spike | benign (length-grouped batches) | `Record(benign_spike)` the first time, nothing else; the loss joins the window |
//! | anything else | — | the loss joins the window (the last `guards.spike_window` finite losses); no judgement before `guards.spike_history` of them |
//!
//! The window's spread is the larger of 1.4826 × its MAD and the distance from its median to its
//! 90th percentile over 1.2816 (both are σ for normal noise; the second holds a heavy upper tail —
//! one hard sample in a small batch at a low loss — as the run's own noise), and at least 0.01
//! (1 % of the loss). Where that tail is wide the z-score of even a pathological batch stays low:
//! the second route, a loss several times beyond anything in the window, catches it.
//! On the default run (`contrai-train`'s golden `metrics.jsonl`) the highest robust z is 4.3 and
//! the highest loss over its window's highest 1.87 (tests/it/spike.rs holds both under half the
//! thresholds). The window lives in [`State`] and comes back with the checkpoint a rollback
//! restores; the triage's memory ([`Triage`]: the spikes, the rows that left, the LR factor) is
//! kept through every rollback ([`crate::conductor::Conductor::adopt`]) and saved with the state.
//! With the guards off (`guards.enabled = false`) or `spike_z = inf`, nothing is triaged.

use std::collections::BTreeSet;

use contrai_doctor::stats::{median, robust_sigma, theil_sen};
use contrai_recipe::recipe::Guards;
use contrai_run::{Decision, DecisionKind, QuarantineEntry, SpikeCause};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::awaiting::Await;
use crate::conductor::Conductor;
use crate::protocol::{Action, Failure, Request, RestorePoint, RestoreScope, SkippedBatch, Turn};
use crate::state::State;

/// σ over the distance from the median to the 90th percentile, for normal noise.
const Q90_SIGMAS: f64 = 1.2816;
/// The smallest spread of log losses the detector assumes (1 %).
const MIN_SPREAD: f64 = 0.01;
/// The most a length fit's residual spread may keep of the raw spread (half the variance
/// explained): a slope fitted to noise explains nothing away.
const EXPLAINED: f64 = 0.7;

/// The recent finite training losses, oldest first, with their batches' mean lengths.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// (loss, mean tokens a sample) of each step.
    pub points: Vec<(f32, Option<f32>)>,
}

impl Window {
    /// Adds a step's loss (a positive one: a log loss), forgetting the oldest beyond `size`.
    pub fn push(&mut self, loss: f32, length: Option<f32>, size: usize) {
        if !(loss > 0.0 && loss.is_finite()) {
            return;
        }
        self.points.push((loss, length));
        let over = self.points.len().saturating_sub(size);
        self.points.drain(..over);
    }
}

/// A spike the triage acted on.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spiked {
    /// The step that spiked.
    pub step: u64,
    /// Its batch's rows, sorted (empty: the engine cannot tell).
    pub rows: Vec<u64>,
    /// Its loss.
    pub loss: f32,
    /// What the conductor made of it.
    pub cause: SpikeCause,
}

/// What spike triage remembers through rollbacks.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Triage {
    /// Every spike acted on, in order (each one a rollback; their batches are skipped).
    pub spikes: Vec<Spiked>,
    /// Rows of spiked batches not trained since in a step that did not spike, sorted: a spike
    /// that shares them is the samples spiking again.
    pub suspects: Vec<u64>,
    /// Training rows that left for a data cause, sorted.
    pub left: Vec<usize>,
    /// The product of the LR cuts for optimisation causes (1: none).
    pub lr_factor: f64,
    /// Whether a benign length-following jump was recorded (once a run).
    pub benign_noted: bool,
}

impl Default for Triage {
    fn default() -> Self {
        Triage {
            spikes: Vec::new(),
            suspects: Vec::new(),
            left: Vec::new(),
            lr_factor: 1.0,
            benign_noted: false,
        }
    }
}

impl Triage {
    /// Rows trained in a step that did not spike are suspects no more.
    pub fn clear(&mut self, rows: &[u64]) {
        if !self.suspects.is_empty() {
            self.suspects.retain(|r| rows.binary_search(r).is_err());
        }
    }

    /// The batches to skip: every spike's.
    pub fn skipped(&self) -> Vec<SkippedBatch> {
        self.spikes
            .iter()
            .map(|s| SkippedBatch {
                step: s.step,
                rows: s.rows.clone(),
            })
            .collect()
    }
}

/// How far a log loss stands above a window of log losses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// Robust z-score.
    pub z: f64,
    /// The loss over the window's median.
    pub ratio: f64,
    /// The loss over the window's highest.
    pub over_max: f64,
    /// The window's median (log).
    pub median: f64,
    /// The window's highest (log).
    pub top: f64,
    /// The window's spread (log).
    pub spread: f64,
}

impl Score {
    /// Robust z and ratios of `y` against the log losses `window` (at least one).
    pub fn of(window: &[f64], y: f64) -> Score {
        let m = median(window).unwrap_or(y);
        let q90 = upper(window, 0.9);
        let top = window.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let spread = robust_sigma(window, m)
            .max((q90 - m) / Q90_SIGMAS)
            .max(MIN_SPREAD);
        Score {
            z: (y - m) / spread,
            ratio: (y - m).exp(),
            over_max: (y - top).exp(),
            median: m,
            top,
            spread,
        }
    }

    /// Whether it is a spike under the guards' thresholds.
    pub fn spikes(&self, g: &Guards) -> bool {
        (self.z >= g.spike_z || self.over_max >= g.spike_over_max) && self.ratio >= g.spike_ratio
    }

    /// The loss from which a step is a spike against this window.
    pub fn threshold(&self, g: &Guards) -> f64 {
        let by_z = self.median + g.spike_z * self.spread;
        let by_max = self.top + g.spike_over_max.ln();
        by_z.min(by_max).max(self.median + g.spike_ratio.ln()).exp()
    }
}

/// The `p` quantile of `v` (linear between order statistics).
fn upper(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let k = (s.len().saturating_sub(1)) as f64 * p;
    let (lo, hi) = (
        k.floor() as usize,
        (k.ceil() as usize).min(s.len().saturating_sub(1)),
    );
    s.get(lo).map_or(f64::NAN, |a| a + (s[hi] - a) * (k - lo as f64))
}

/// What a finite step's loss is, against the window.
#[derive(Debug, Clone, PartialEq)]
pub enum Judged {
    /// Nothing unusual (or too little history to judge).
    Normal,
    /// A spike.
    Spike(Score),
    /// A jump the batch's length explains: the score of the raw loss, and of the residual.
    Benign(Score, LengthFit),
}

/// The log loss fitted on the log batch length over the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthFit {
    /// Theil–Sen slope of log loss on log length.
    pub slope: f64,
    /// The step's residual's score against the window's residuals.
    pub residual: Score,
    /// The loss the fit expects at the step's length.
    pub expected: f64,
}

/// The spike rule: the step's `loss` (finite, batch `length`) against `window`.
pub fn judge(window: &Window, loss: f32, length: Option<f32>, g: &Guards) -> Judged {
    let logs: Vec<f64> = window.points.iter().map(|p| log(p.0)).collect();
    if logs.len() < g.spike_history || loss <= 0.0 {
        return Judged::Normal;
    }
    let score = Score::of(&logs, log(loss));
    if !score.spikes(g) {
        return Judged::Normal;
    }
    match length.and_then(|l| fit_length(window, loss, l, g)) {
        Some(fit) if fit.residual.spread <= EXPLAINED * score.spread && !fit.residual.spikes(g) => {
            Judged::Benign(score, fit)
        }
        _ => Judged::Spike(score),
    }
}

/// The natural log of a loss (a zero loss as the smallest positive f32).
fn log(x: f32) -> f64 {
    f64::from(x.max(f32::MIN_POSITIVE)).ln()
}

/// The log-log fit of loss on batch length over the window's steps that report a length, and
/// the step's residual against theirs; `None` with too few lengths or lengths that do not vary.
fn fit_length(window: &Window, loss: f32, length: f32, g: &Guards) -> Option<LengthFit> {
    let (x, y): (Vec<f64>, Vec<f64>) = window
        .points
        .iter()
        .filter_map(|&(l, n)| Some((f64::from(n.filter(|n| *n > 0.0)?).ln(), log(l))))
        .unzip();
    if x.len() < g.spike_history || length <= 0.0 {
        return None;
    }
    let slope = theil_sen(&x, &y)?;
    let shifted: Vec<f64> = x.iter().zip(&y).map(|(x, y)| y - slope * x).collect();
    let intercept = median(&shifted)?;
    let residuals: Vec<f64> = shifted.iter().map(|s| s - intercept).collect();
    let at = intercept + slope * f64::from(length).ln();
    Some(LengthFit {
        slope,
        residual: Score::of(&residuals, log(loss) - at),
        expected: at.exp(),
    })
}

/// The cause of a spike of `rows` (sorted): data when they share the triage's suspects beyond
/// chance — those rows — else optimisation after an earlier spike, else undetermined. `kept`: the
/// training rows in use. Also the chance of sharing as many.
pub fn attribute(triage: &Triage, rows: &[u64], kept: usize, chance: f64) -> (SpikeCause, Vec<u64>, f64) {
    let suspects = &triage.suspects;
    let shared: Vec<u64> = rows
        .iter()
        .copied()
        .filter(|r| suspects.binary_search(r).is_ok())
        .collect();
    let expected = rows.len() as f64 * suspects.len() as f64 / kept.max(1) as f64;
    let p = poisson_tail(expected, shared.len());
    if !shared.is_empty() && p < chance {
        return (SpikeCause::Data, shared, p);
    }
    let cause = match triage.spikes.is_empty() {
        true => SpikeCause::Undetermined,
        false => SpikeCause::Optimisation,
    };
    (cause, Vec::new(), p)
}

/// P(X ≥ k) for X Poisson with mean `mean`: the chance a random batch shares `k` rows or more.
pub fn poisson_tail(mean: f64, k: usize) -> f64 {
    let (mut term, mut below) = ((-mean).exp(), 0.0);
    for i in 0..k {
        below += term;
        term *= mean / (i + 1) as f64;
    }
    (1.0 - below).clamp(0.0, 1.0)
}

/// A finite training step as the triage sees it.
#[derive(Debug, Clone)]
pub(crate) struct StepSeen {
    /// The step (1-based).
    pub step: u64,
    /// Its loss.
    pub loss: f32,
    /// Its batch's rows, sorted and without repeats.
    pub rows: Vec<u64>,
    /// Its batch's mean tokens a sample.
    pub length: Option<f32>,
}

impl Conductor {
    /// Triage of a finite step: a spike gives the turn that rolls it back (or stops the run);
    /// anything else joins the window, a first benign jump recorded in `out`.
    pub(crate) fn triage(&mut self, seen: StepSeen, out: &mut Vec<Action>) -> Option<Turn> {
        let g = &self.recipe.guards;
        let acting = g.enabled && g.spike_z.is_finite();
        match judge(&self.state.spike_window, seen.loss, seen.length, g) {
            Judged::Spike(score) if acting => return Some(self.on_spike(seen, score)),
            Judged::Benign(score, fit) if acting && !self.state.triage.benign_noted => {
                self.state.triage.benign_noted = true;
                out.push(Action::Record(benign(&self.state, &seen, score, fit)));
            }
            _ => {}
        }
        self.state.triage.clear(&seen.rows);
        let size = self.recipe.guards.spike_window;
        self.state.spike_window.push(seen.loss, seen.length, size);
        None
    }

    /// A spike: the retries spent stop the run; else its cause is told, its batch quarantined
    /// and skipped, and the last checkpoint restored.
    fn on_spike(&mut self, seen: StepSeen, score: Score) -> Turn {
        let g = self.recipe.guards.clone();
        if self.state.triage.spikes.len() >= g.spike_retries as usize {
            let d = abort(&self.state, &seen, score, &g);
            let reason = d.reason.clone();
            return self.fail(Vec::new(), Some(d), Failure::Diverged(reason));
        }
        let kept = self
            .info
            .train_samples
            .saturating_sub(self.state.dropped_rows().len());
        let (cause, left, p) = attribute(&self.state.triage, &seen.rows, kept, g.spike_chance);
        let d = rollback(&self.state, &seen, score, (cause, &left, p), &g);
        let t = &mut self.state.triage;
        t.left.extend(left.iter().map(|r| *r as usize));
        t.left.sort_unstable();
        t.left.dedup();
        let suspects: BTreeSet<u64> = t.suspects.iter().chain(&seen.rows).copied().collect();
        t.suspects = suspects
            .into_iter()
            .filter(|r| left.binary_search(r).is_err())
            .collect();
        if cause == SpikeCause::Optimisation {
            t.lr_factor *= g.spike_lr_factor;
        }
        t.spikes.push(Spiked {
            step: seen.step,
            rows: seen.rows.clone(),
            loss: seen.loss,
            cause,
        });
        let entry = QuarantineEntry {
            step: seen.step,
            phase: self.state.phase,
            rows: seen.rows,
            ids: Vec::new(),
            left,
            loss: seen.loss,
            threshold: score.threshold(&g) as f32,
            cause,
        };
        let mut out = vec![Action::Record(d), Action::Quarantine(entry)];
        if cause == SpikeCause::Data {
            out.push(Action::DropSamples {
                rows: self.state.dropped_rows(),
            });
        }
        out.push(Action::SkipBatches {
            batches: self.state.triage.skipped(),
        });
        // The spiking loss was measured on the weights the last step's update made; a
        // checkpoint of that step holds them, so the rollback goes below it.
        let request = Request::Restore {
            to: RestorePoint::Before(self.state.step),
            scope: RestoreScope::Everything,
        };
        self.ask(out, request, Await::SpikeRestored)
    }
}

/// The numbers behind a spike's decision.
fn evidence(state: &State, seen: &StepSeen, score: Score, g: &Guards) -> serde_json::Value {
    json!({
        "train_loss": seen.loss, "median": score.median.exp(), "robust_z": score.z,
        "ratio": score.ratio, "over_max": score.over_max, "threshold": score.threshold(g),
        "spike_z": g.spike_z, "spike_over_max": g.spike_over_max, "spike_ratio": g.spike_ratio, "rows": seen.rows.len(), "length": seen.length,
        "retries": state.triage.spikes.len(), "max_retries": g.spike_retries,
    })
}

/// What was seen, for a decision's reason.
fn seen_text(seen: &StepSeen, score: Score, g: &Guards) -> String {
    format!(
        "training loss {:.4} is {:.1}× the recent median {:.4} and {:.1}× the recent highest (robust z {:.1}; a spike from {:.4})",
        seen.loss,
        score.ratio,
        score.median.exp(),
        score.over_max,
        score.z,
        score.threshold(g)
    )
}

/// The decision of a spike rolled back, by its cause.
fn rollback(
    state: &State,
    seen: &StepSeen,
    score: Score,
    (cause, left, p): (SpikeCause, &[u64], f64),
    g: &Guards,
) -> Decision {
    let retry = format!(
        "back to the last checkpoint, retry {} of {}",
        state.triage.spikes.len() + 1,
        g.spike_retries
    );
    let earlier: Vec<u64> = state.triage.spikes.iter().map(|s| s.step).collect();
    let mut ev = evidence(state, seen, score, g);
    ev["cause"] = json!(cause);
    ev["earlier_spikes"] = json!(earlier);
    let seen_at = seen_text(seen, score, g);
    let (kind, what) = match cause {
        SpikeCause::Undetermined if seen.rows.is_empty() => (
            DecisionKind::RollbackSpike,
            "the step's batch is skipped and quarantined; the engine reports no rows, so a data cause cannot be told: a further spike cuts the LR".to_string(),
        ),
        SpikeCause::Undetermined => (
            DecisionKind::RollbackSpike,
            format!(
                "its batch of {} rows is skipped and quarantined (quarantine.jsonl); the cause shows if its rows or other batches spike",
                seen.rows.len()
            ),
        ),
        SpikeCause::Data => {
            ev["left"] = json!(left);
            ev["chance"] = json!(p);
            (
                DecisionKind::DropSpiking,
                format!(
                    "{} of its rows spiked before (steps {earlier:?}; a random batch shares as many with probability {p:.3}): a data cause, they leave the training set and the batch is skipped",
                    left.len()
                ),
            )
        }
        SpikeCause::Optimisation => {
            let (old, new) = (state.triage.lr_factor, state.triage.lr_factor * g.spike_lr_factor);
            ev["lr_factor"] = json!(new);
            (
                DecisionKind::LrCutSpike,
                format!(
                    "other rows than the earlier spikes' (steps {earlier:?}): an optimisation cause, LR × {} (spike factor {old} → {new}) and the batch is skipped",
                    g.spike_lr_factor
                ),
            )
        }
    };
    Decision::new(
        seen.step,
        state.phase,
        kind,
        format!("{seen_at}: {what}; {retry}"),
        ev,
    )
}

/// The decision that stops a run whose spikes outlasted the retries, with every spike.
fn abort(state: &State, seen: &StepSeen, score: Score, g: &Guards) -> Decision {
    let spikes: Vec<serde_json::Value> = state
        .triage
        .spikes
        .iter()
        .map(|s| json!({"step": s.step, "loss": s.loss, "cause": s.cause, "rows": s.rows}))
        .collect();
    let mut ev = evidence(state, seen, score, g);
    ev["spikes"] = json!(spikes);
    ev["left"] = json!(state.triage.left);
    let reason = format!(
        "{} again after {} spike rollbacks (steps {:?}, see quarantine.jsonl): giving up; audit the quarantined samples, lower the LR or clip the gradient norm",
        seen_text(seen, score, g),
        spikes.len(),
        state.triage.spikes.iter().map(|s| s.step).collect::<Vec<_>>()
    );
    Decision::new(seen.step, state.phase, DecisionKind::AbortSpike, reason, ev)
}

/// The decision that notes a jump explained by batch length.
fn benign(state: &State, seen: &StepSeen, score: Score, fit: LengthFit) -> Decision {
    let reason = format!(
        "training loss {:.4} jumped {:.1}× the recent median (robust z {:.1}) with its batch's length ({:.1} tokens a sample), as the window's losses follow length (log-log slope {:.2}; {:.4} expected): length-grouped batches, benign — no action, and further such jumps are not recorded",
        seen.loss,
        score.ratio,
        score.z,
        seen.length.unwrap_or(f32::NAN),
        fit.slope,
        fit.expected
    );
    let ev = json!({"train_loss": seen.loss, "median": score.median.exp(), "robust_z": score.z,
                    "ratio": score.ratio, "length": seen.length, "slope": fit.slope,
                    "expected": fit.expected, "residual_z": fit.residual.z});
    Decision::new(seen.step, state.phase, DecisionKind::BenignSpike, reason, ev)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(losses: &[f32]) -> Window {
        let mut w = Window::default();
        for l in losses {
            w.push(*l, None, 64);
        }
        w
    }

    /// A noisy flat curve around 0.5 (± 5 %).
    fn noisy(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| 0.5 * (1.0 + 0.05 * ((i * 7 % 11) as f32 / 5.0 - 1.0)))
            .collect()
    }

    #[test]
    fn a_spike_needs_history_a_robust_z_and_the_ratio_floor() {
        let g = Guards::default();
        assert_eq!(
            judge(&window(&noisy(10)), 5.0, None, &g),
            Judged::Normal,
            "too little history"
        );
        let w = window(&noisy(40));
        assert!(matches!(judge(&w, 5.0, None, &g), Judged::Spike(s) if s.z > 10.0));
        assert_eq!(judge(&w, 0.6, None, &g), Judged::Normal, "noise");
        // A flat curve's tiny spread: 1.6× is many deviations but under the ratio floor.
        let flat = window(&[0.5; 40]);
        assert_eq!(judge(&flat, 0.8, None, &g), Judged::Normal);
        assert!(matches!(judge(&flat, 1.1, None, &g), Judged::Spike(_)));
    }

    #[test]
    fn a_loss_far_beyond_a_wide_windows_highest_is_a_spike_at_a_low_z() {
        let g = Guards::default();
        let wide: Vec<f32> = (0..64).map(|i| [0.05, 0.1, 0.2, 0.4, 0.8][i % 5]).collect();
        let w = window(&wide);
        let Judged::Spike(s) = judge(&w, 8.0, None, &g) else {
            panic!("10× the highest")
        };
        assert!(s.z < 5.0 && s.over_max > 9.9, "{s:?}");
        assert!(
            (s.threshold(&g) - 3.2).abs() < 1e-6,
            "4× the highest: {}",
            s.threshold(&g)
        );
        assert_eq!(judge(&w, 2.4, None, &g), Judged::Normal, "3× the highest");
    }

    #[test]
    fn a_length_that_explains_nothing_explains_no_spike() {
        let g = Guards::default();
        // Lengths 20–21 tokens uncorrelated with the losses' ±5 % noise: any slope is noise's.
        let mut w = Window::default();
        for (i, l) in noisy(40).into_iter().enumerate() {
            w.push(l, Some(20.0 + ((i * 3) % 7) as f32 / 7.0), 64);
        }
        assert!(matches!(judge(&w, 5.0, Some(21.0), &g), Judged::Spike(_)));
        assert!(matches!(judge(&w, 5.0, Some(200.0), &g), Judged::Spike(_)));
        // Losses that follow length (40–60 tokens): a 10× loss at 10× the length is benign.
        let mut w = Window::default();
        for (i, l) in noisy(40).into_iter().enumerate() {
            let n = 40.0 + (i % 21) as f32;
            w.push(l * n / 50.0, Some(n), 64);
        }
        assert!(
            matches!(judge(&w, 5.0, Some(500.0), &g), Judged::Benign(_, f) if (f.slope - 1.0).abs() < 0.2)
        );
        assert!(matches!(judge(&w, 5.0, Some(50.0), &g), Judged::Spike(_)));
    }

    #[test]
    fn heavy_tailed_batch_noise_is_the_runs_own() {
        // One hard sample in a small batch at a low loss: a 20× jump every 8th step.
        let g = Guards::default();
        let losses: Vec<f32> = (0..64).map(|i| if i % 8 == 3 { 0.15 } else { 0.006 }).collect();
        assert_eq!(judge(&window(&losses), 0.18, None, &g), Judged::Normal);
        let w = window(&[0.006; 64]);
        assert!(
            matches!(judge(&w, 0.18, None, &g), Judged::Spike(_)),
            "never seen before"
        );
    }

    #[test]
    fn rows_shared_beyond_chance_are_a_data_cause() {
        let mut t = Triage::default();
        assert_eq!(
            attribute(&t, &[1, 2, 3, 4], 1000, 0.05).0,
            SpikeCause::Undetermined
        );
        t.spikes.push(Spiked {
            step: 10,
            rows: vec![1, 2, 3, 4],
            loss: 9.0,
            cause: SpikeCause::Undetermined,
        });
        t.suspects = vec![1, 2, 3, 4];
        let (cause, left, p) = attribute(&t, &[4, 50, 60, 70], 1000, 0.05);
        assert_eq!((cause, left), (SpikeCause::Data, vec![4]));
        assert!((p - (1.0 - (-0.016f64).exp())).abs() < 1e-12, "{p}");
        assert_eq!(
            attribute(&t, &[5, 50, 60, 70], 1000, 0.05).0,
            SpikeCause::Optimisation
        );
        // On 20 rows, sharing one of 4 is what random batches do: not evidence.
        assert_eq!(attribute(&t, &[4, 5, 6, 7], 20, 0.05).0, SpikeCause::Optimisation);
        // Rows trained since without a spike are no longer suspects.
        t.clear(&[4, 9]);
        assert_eq!(t.suspects, [1, 2, 3]);
        assert_eq!(
            attribute(&t, &[4, 50, 60, 70], 1000, 0.05).0,
            SpikeCause::Optimisation
        );
        assert_eq!(
            attribute(&t, &[], 1000, 0.05).0,
            SpikeCause::Optimisation,
            "no rows"
        );
    }

    #[test]
    fn the_poisson_tail_is_the_chance_of_sharing_as_many() {
        assert_eq!(poisson_tail(0.3, 0), 1.0);
        assert!((poisson_tail(0.3, 1) - (1.0 - (-0.3f64).exp())).abs() < 1e-12);
        let two = 1.0 - (-0.3f64).exp() * 1.3;
        assert!((poisson_tail(0.3, 2) - two).abs() < 1e-12);
        assert_eq!(poisson_tail(0.0, 1), 0.0);
    }
}
