//! The lifecycle controller's rules (`../shared/DESIGN.md` §1) as pure functions of the numbers a
//! run produces, and the state they keep in every checkpoint so that a resumed run decides alike.

use std::collections::BTreeMap;

use contrai_recipe::Recipe;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One controller decision: a line of `decisions.jsonl` and of the console.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Global step at which it was taken.
    pub step: u64,
    /// Phase it was taken in.
    pub phase: String,
    /// What was decided (`enter_contract`, `rollback_nonfinite`, ...).
    pub kind: String,
    /// Why, in words.
    pub reason: String,
    /// The numbers behind it.
    pub evidence: Value,
}

impl Decision {
    /// A decision with its evidence.
    pub fn new(step: u64, phase: &str, kind: &str, reason: impl Into<String>, evidence: Value) -> Self {
        Decision {
            step,
            phase: phase.into(),
            kind: kind.into(),
            reason: reason.into(),
            evidence,
        }
    }
}

/// What the controller carries from step to step; saved in every checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Control {
    /// Global step at which the current phase started.
    pub phase_start: u64,
    /// Steps the current phase may take.
    pub phase_steps: u64,
    /// The scheduled LR the phase entered with (contract and refine anneal from it).
    pub phase_lr0: f64,
    /// Multiplier on every scheduled LR, lowered by non-finite rollbacks and plateau cuts.
    pub lr_scale: f64,
    /// Non-finite rollbacks so far.
    pub nan_retries: u32,
    /// Step of the last plateau cut (the plateau watch restarts there).
    pub last_cut: Option<u64>,
    /// Validation loss at the previous main checkpoint.
    pub prev_ck_val: Option<f32>,
    /// Stable checkpoints in a row.
    pub stable_run: u32,
    /// Whether main was ever stable between two checkpoints.
    pub stabilised: bool,
    /// The best validation loss at a main checkpoint.
    pub best_ck_val: Option<f32>,
    /// Main checkpoints in a row that beat the best by more than `stable_delta` (still learning).
    pub improving_run: u32,
    /// Contract evaluations in a row beyond tolerance.
    pub worse_run: u32,
    /// The best validation loss since contraction began (its entry value first) and its step,
    /// whose checkpoint a contraction rollback restores.
    pub contract_best: Option<(u64, f32)>,
    /// Train rows dropped as the noisiest, sorted.
    pub dropped: Vec<usize>,
    /// Whether the noisiest samples were looked for (possibly none was dropped).
    pub noisy_checked: bool,
    /// Sparsity caps per module measured by `diagnose`.
    pub caps: BTreeMap<String, f64>,
    /// Modules whose pruning stopped (train/val divergence).
    pub frozen: Vec<String>,
    /// The validation − training loss gap at contraction's first evaluation.
    pub gap0: Option<f64>,
    /// Sum and count of training losses since the last evaluation.
    pub train_since_eval: (f64, u64),
    /// Sparsity per module at the last evaluation.
    pub sparsity_at_eval: BTreeMap<String, f64>,
    /// Step at which main ended and why.
    pub main_end: Option<(u64, String)>,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            phase_start: 0,
            phase_steps: 0,
            phase_lr0: 0.0,
            lr_scale: 1.0,
            nan_retries: 0,
            last_cut: None,
            prev_ck_val: None,
            stable_run: 0,
            stabilised: false,
            best_ck_val: None,
            improving_run: 0,
            worse_run: 0,
            contract_best: None,
            dropped: Vec::new(),
            noisy_checked: false,
            caps: BTreeMap::new(),
            frozen: Vec::new(),
            gap0: None,
            train_since_eval: (0.0, 0),
            sparsity_at_eval: BTreeMap::new(),
            main_end: None,
        }
    }
}

/// What a rule asks the trainer to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing.
    Continue,
    /// End the current phase (main: go on to diagnose; contract: go on to refine).
    EndPhase(Decision),
    /// Restore the best checkpoint's weights, then end the phase.
    RollbackToBest(Decision),
}

/// Relative change from `a` to `b`.
fn rel_change(a: f32, b: f32) -> f64 {
    (f64::from(b) - f64::from(a)).abs() / f64::from(a).abs().max(1e-12)
}

impl Control {
    /// The main-phase stability rule at a checkpoint: main ends once the validation loss changed
    /// by less than `contract.stable_delta` for `contract.stable_checkpoints` checkpoints in a row.
    pub fn main_checkpoint(&mut self, step: u64, val: f32, recipe: &Recipe) -> Action {
        let c = &recipe.contract;
        let improving = self
            .best_ck_val
            .is_none_or(|b| f64::from(val) < f64::from(b) * (1.0 - c.stable_delta));
        self.improving_run = if improving { self.improving_run + 1 } else { 0 };
        self.best_ck_val = Some(self.best_ck_val.map_or(val, |b| b.min(val)));
        let Some(prev) = self.prev_ck_val.replace(val) else {
            return Action::Continue;
        };
        let change = rel_change(prev, val);
        if change < c.stable_delta {
            self.stable_run += 1;
            self.stabilised = true;
        } else {
            self.stable_run = 0;
        }
        if self.stable_run >= c.stable_checkpoints && recipe.run.has_phase("contract") {
            let saved = (self.phase_start + self.phase_steps).saturating_sub(step);
            return Action::EndPhase(Decision::new(
                step,
                "main",
                "main_stable",
                format!(
                    "validation loss changed {:.2} % (< {:.0} %) over {} checkpoints in a row: main has converged; contracting now saves {saved} steps",
                    100.0 * change,
                    100.0 * c.stable_delta,
                    self.stable_run
                ),
                json!({"val_loss": val, "previous_val_loss": prev, "relative_change": change,
                       "stable_checkpoints": self.stable_run, "steps_saved": saved}),
            ));
        }
        Action::Continue
    }

    /// The contraction guard at an evaluation: `contract.patience` evaluations in a row worse than
    /// the best validation loss since contraction began by more than `contract.tolerance` roll
    /// back to that best point's checkpoint (the contraction is what is undone, not main).
    pub fn contract_eval(&mut self, step: u64, val: f32, recipe: &Recipe) -> Action {
        let c = &recipe.contract;
        let (best_step, reference) = self.contract_best.unwrap_or((step, val));
        if val < reference {
            self.contract_best = Some((step, val));
        }
        let worse = f64::from(val) > f64::from(reference) * (1.0 + c.tolerance);
        self.worse_run = if worse { self.worse_run + 1 } else { 0 };
        if self.worse_run < c.patience {
            return Action::Continue;
        }
        Action::RollbackToBest(Decision::new(
            step,
            "contract",
            "rollback_contract",
            format!(
                "validation loss {val:.4} is more than {:.0} % above the contraction's best {reference:.4} (step {best_step}) for {} evaluations: the contraction hurts generalisation; back to that checkpoint, contraction ends",
                100.0 * c.tolerance,
                self.worse_run
            ),
            json!({"val_loss": val, "best_val_loss": reference, "best_step": best_step,
                   "tolerance": c.tolerance, "evaluations_worse": self.worse_run}),
        ))
    }

    /// At main's planned end, when the stability rule never ended it: contraction is forced
    /// there (the latest point that leaves its budget) unless main never stabilised — its
    /// validation loss still beat its best by more than `stable_delta` at each of the last
    /// `stable_checkpoints` checkpoints, so more main steps would still pay.
    pub fn force_or_skip(&self, step: u64, recipe: &Recipe) -> (bool, Decision) {
        let c = &recipe.contract;
        let evidence = json!({"val_loss": self.prev_ck_val, "best_val_loss": self.best_ck_val,
                              "improving_checkpoints": self.improving_run, "stable_delta": c.stable_delta,
                              "ever_stable": self.stabilised});
        if self.stabilised || self.improving_run < c.stable_checkpoints {
            let why = if self.stabilised {
                "main was stable between checkpoints but not for long enough to end early".to_string()
            } else {
                format!(
                    "the validation loss never held within {:.0} % between checkpoints (noise), but it stopped improving",
                    100.0 * c.stable_delta
                )
            };
            return (
                true,
                Decision::new(
                    step,
                    "contract",
                    "force_contract",
                    format!("{why}: contraction is forced at the latest point that leaves its budget"),
                    evidence,
                ),
            );
        }
        (
            false,
            Decision::new(
                step,
                "contract",
                "skip_contract",
                format!(
                    "main never stabilised: its validation loss fell by more than {:.0} % at each of the last {} checkpoints; more main steps would pay, and contracting an unconverged model would lock in its errors",
                    100.0 * c.stable_delta,
                    self.improving_run
                ),
                evidence,
            ),
        )
    }

    /// After a non-finite loss or gradient: lowers the LR and counts the retry. `Err` when the
    /// retries are spent.
    pub fn nonfinite(
        &mut self,
        step: u64,
        phase: &str,
        loss: f32,
        norm: f32,
        recipe: &Recipe,
    ) -> Result<Decision, Decision> {
        let g = &recipe.guards;
        let evidence = json!({"train_loss": loss.to_string(), "grad_norm": norm.to_string(),
                              "retries": self.nan_retries, "max_retries": g.nan_retries});
        if self.nan_retries >= g.nan_retries {
            return Err(Decision::new(
                step,
                phase,
                "abort_nonfinite",
                format!(
                    "non-finite loss ({loss}) or gradient norm ({norm}) again after {} retries: giving up",
                    self.nan_retries
                ),
                evidence,
            ));
        }
        self.nan_retries += 1;
        let old = self.lr_scale;
        self.lr_scale *= g.nan_lr_factor;
        Ok(Decision::new(
            step,
            phase,
            "rollback_nonfinite",
            format!(
                "non-finite loss ({loss}) or gradient norm ({norm}): back to the last good checkpoint, LR × {} (scale {old} → {}), retry {} of {}",
                g.nan_lr_factor, self.lr_scale, self.nan_retries, g.nan_retries
            ),
            evidence,
        ))
    }

    /// The plateau rule: a plateau finding cuts the LR unless the last cut is within the cooldown.
    pub fn plateau(&mut self, step: u64, evidence: &str, recipe: &Recipe) -> Option<Decision> {
        let g = &recipe.guards;
        if self.last_cut.is_some_and(|c| step < c + g.plateau_cooldown) {
            return None;
        }
        let old = self.lr_scale;
        self.lr_scale *= g.plateau_lr_factor;
        self.last_cut = Some(step);
        Some(Decision::new(
            step,
            "main",
            "lr_cut_plateau",
            format!(
                "the training loss plateaued ({evidence}): LR × {} (scale {old} → {}); no further cut for {} steps",
                g.plateau_lr_factor, self.lr_scale, g.plateau_cooldown
            ),
            json!({"lr_scale": self.lr_scale, "factor": g.plateau_lr_factor, "cooldown": g.plateau_cooldown}),
        ))
    }

    /// The divergence rule at a contraction evaluation: when the validation − training loss gap
    /// has grown by more than `contract.divergence` × the validation loss since contraction
    /// began, the modules pruned further since the last evaluation stop being pruned.
    pub fn divergence(
        &mut self,
        step: u64,
        val: f32,
        sparsity: &BTreeMap<String, f64>,
        recipe: &Recipe,
    ) -> Option<Decision> {
        let (sum, n) = std::mem::take(&mut self.train_since_eval);
        let before = std::mem::replace(&mut self.sparsity_at_eval, sparsity.clone());
        if n == 0 {
            return None;
        }
        let gap = f64::from(val) - sum / n as f64;
        let gap0 = *self.gap0.get_or_insert(gap);
        let growth = (gap - gap0) / f64::from(val).abs().max(1e-12);
        if growth <= recipe.contract.divergence {
            return None;
        }
        let grown: Vec<String> = sparsity
            .iter()
            .filter(|(m, s)| **s > before.get(*m).copied().unwrap_or(0.0) && !self.frozen.contains(m))
            .map(|(m, _)| m.clone())
            .collect();
        if grown.is_empty() {
            return None;
        }
        self.frozen.extend(grown.iter().cloned());
        Some(Decision::new(
            step,
            "contract",
            "freeze_pruning",
            format!(
                "the validation − training loss gap grew from {gap0:.4} to {gap:.4} ({:.1} % of the validation loss, threshold {:.0} %): {} stop being pruned at their current sparsity",
                100.0 * growth,
                100.0 * recipe.contract.divergence,
                grown.join(", ")
            ),
            json!({"gap": gap, "gap_at_entry": gap0, "growth": growth, "modules": grown}),
        ))
    }
}

/// The LR of step `k` (0-based) of a linear anneal over `steps` steps from `from` to `to`.
pub fn linear(from: f64, to: f64, k: u64, steps: u64) -> f64 {
    if steps <= 1 {
        return to;
    }
    from + (to - from) * (k.min(steps - 1) as f64 / (steps - 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipe() -> Recipe {
        Recipe::default()
    }

    #[test]
    fn main_ends_after_two_stable_checkpoints_in_a_row() {
        let r = recipe();
        let mut c = Control {
            phase_start: 30,
            phase_steps: 400,
            ..Control::default()
        };
        assert_eq!(c.main_checkpoint(80, 0.50, &r), Action::Continue);
        assert_eq!(c.main_checkpoint(130, 0.40, &r), Action::Continue, "−20 %");
        assert_eq!(c.improving_run, 2);
        assert!(!c.force_or_skip(130, &r).0, "still learning: skip");
        assert_eq!(
            c.main_checkpoint(180, 0.395, &r),
            Action::Continue,
            "first stable"
        );
        assert!(c.stabilised);
        assert_eq!(c.force_or_skip(180, &r).1.kind, "force_contract");
        assert_eq!(c.main_checkpoint(230, 0.37, &r), Action::Continue, "−6 % resets");
        assert_eq!(c.main_checkpoint(280, 0.368, &r), Action::Continue);
        match c.main_checkpoint(330, 0.366, &r) {
            Action::EndPhase(d) => {
                assert_eq!(d.kind, "main_stable");
                assert_eq!(d.evidence["steps_saved"], 100);
            }
            a => panic!("{a:?}"),
        }
    }

    #[test]
    fn a_plain_run_never_ends_main_on_stability() {
        let mut r = recipe();
        r.run.phases = vec!["main".into()];
        let mut c = Control::default();
        for (s, v) in [(50, 0.3), (100, 0.3), (150, 0.3), (200, 0.3)] {
            assert_eq!(c.main_checkpoint(s, v, &r), Action::Continue);
        }
    }

    #[test]
    fn contraction_rolls_back_after_patience_evaluations_beyond_tolerance() {
        let r = recipe();
        let mut c = Control {
            contract_best: Some((300, 0.20)),
            ..Control::default()
        };
        assert_eq!(c.contract_eval(320, 0.203, &r), Action::Continue, "within 2 %");
        assert_eq!(c.contract_eval(340, 0.21, &r), Action::Continue);
        assert_eq!(c.contract_eval(360, 0.22, &r), Action::Continue);
        assert_eq!(
            c.contract_eval(380, 0.19, &r),
            Action::Continue,
            "recovered: a new reference"
        );
        assert_eq!(
            c.contract_eval(400, 0.195, &r),
            Action::Continue,
            "+2.6 % of 0.19"
        );
        assert_eq!(c.contract_eval(420, 0.195, &r), Action::Continue);
        match c.contract_eval(440, 0.25, &r) {
            Action::RollbackToBest(d) => assert_eq!(d.evidence["best_step"], 380, "the new reference"),
            a => panic!("{a:?}"),
        }
    }

    #[test]
    fn nonfinite_retries_are_bounded_and_lower_the_lr() {
        let r = recipe();
        let mut c = Control::default();
        for i in 1..=3 {
            let d = c.nonfinite(10, "main", f32::NAN, f32::NAN, &r).unwrap();
            assert_eq!(d.kind, "rollback_nonfinite");
            assert_eq!(c.nan_retries, i);
        }
        assert!((c.lr_scale - 0.125).abs() < 1e-12);
        assert_eq!(
            c.nonfinite(10, "main", f32::NAN, 1.0, &r).unwrap_err().kind,
            "abort_nonfinite"
        );
    }

    #[test]
    fn plateau_cuts_respect_the_cooldown() {
        let r = recipe();
        let mut c = Control::default();
        assert!(c.plateau(200, "x", &r).is_some());
        assert!(c.plateau(250, "x", &r).is_none(), "within 100 steps");
        assert!(c.plateau(300, "x", &r).is_some());
        assert!((c.lr_scale - 0.25).abs() < 1e-12);
    }

    #[test]
    fn a_growing_gap_freezes_the_modules_pruned_since_the_last_eval() {
        let r = recipe();
        let mut c = Control::default();
        let s1: BTreeMap<String, f64> = [("a".to_string(), 0.1), ("b".to_string(), 0.1)].into();
        c.train_since_eval = (0.2 * 10.0, 10);
        assert!(
            c.divergence(10, 0.30, &s1, &r).is_none(),
            "first eval sets the gap: 0.10"
        );
        let s2: BTreeMap<String, f64> = [("a".to_string(), 0.3), ("b".to_string(), 0.1)].into();
        c.train_since_eval = (0.1 * 10.0, 10);
        let d = c.divergence(20, 0.30, &s2, &r).expect("gap 0.20: +33 % of val");
        assert_eq!(d.evidence["modules"], json!(["a"]));
        assert_eq!(c.frozen, ["a"]);
    }

    #[test]
    fn linear_anneal_hits_both_ends() {
        assert_eq!(linear(1e-3, 0.0, 0, 11), 1e-3);
        assert!((linear(1e-3, 0.0, 5, 11) - 5e-4).abs() < 1e-15);
        assert_eq!(linear(1e-3, 0.0, 10, 11), 0.0);
        assert_eq!(linear(1e-3, 0.0, 0, 1), 0.0);
    }
}
