//! How many steps each phase gets, and how often it evaluates and checkpoints: one place for the
//! run and for `contrai plan`.

use contrai_recipe::{Phase, Recipe};
use serde::Serialize;

/// Optimizer steps each phase plans (0 for a phase the recipe does not run).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PhaseSteps {
    /// Steps of overfitting one batch.
    pub validate: u64,
    /// Main steps (an upper bound: the conductor may end main early).
    pub main: u64,
    /// Contraction steps.
    pub contract: u64,
    /// Final anneal steps.
    pub refine: u64,
}

impl PhaseSteps {
    /// The steps of `recipe`'s phases: main is `main.steps`; contract and refine take their budgets'
    /// shares of main + contract + refine.
    pub fn new(recipe: &Recipe) -> PhaseSteps {
        let has = |p| recipe.run.has_phase(p);
        let c = if has(Phase::Contract) {
            recipe.contract.budget
        } else {
            0.0
        };
        let r = if has(Phase::Refine) {
            recipe.refine.budget
        } else {
            0.0
        };
        let main = recipe.main.steps;
        let total = (main as f64 / (1.0 - c - r)).round() as u64;
        let contract = (total as f64 * c).round() as u64;
        PhaseSteps {
            validate: if has(Phase::Validate) {
                recipe.validate.steps
            } else {
                0
            },
            main,
            contract,
            refine: if has(Phase::Refine) {
                total.saturating_sub(main + contract)
            } else {
                0
            },
        }
    }

    /// The planned steps of `phase`.
    pub fn of(&self, phase: Phase) -> u64 {
        match phase {
            Phase::Validate => self.validate,
            Phase::Main => self.main,
            Phase::Diagnose => 0,
            Phase::Contract => self.contract,
            Phase::Refine => self.refine,
        }
    }

    /// Training steps of main + contract + refine (validate's check not counted).
    pub fn training(&self) -> u64 {
        self.main + self.contract + self.refine
    }

    /// Every planned step, validate's included.
    pub fn all(&self) -> u64 {
        self.validate + self.training()
    }
}

/// `main.steps` that lays the recipe's plan on a job's own budget of `job` optimizer steps (a
/// PyTorch job's `max_steps`, or epochs × batches): the largest main whose main + contract +
/// refine fit in `job`, the phases keeping their shares (contraction 15–30 % of all steps).
pub fn main_for_job(recipe: &Recipe, job: u64) -> u64 {
    let mut trial = recipe.clone();
    let fits = |main: u64, trial: &mut Recipe| {
        trial.main.steps = main;
        PhaseSteps::new(trial).training() <= job
    };
    let (mut lo, mut hi) = (0, job);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid, &mut trial) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Evaluate every this many steps of `phase`: `run.eval_every` in main, `contract.eval_every` in
/// contract and refine (whose phases are short).
pub fn eval_every(phase: Phase, recipe: &Recipe) -> u64 {
    match phase {
        Phase::Main => recipe.run.eval_every,
        _ => recipe.contract.eval_every,
    }
}

/// Checkpoint every this many steps of `phase`: `run.checkpoint_every` in main; in contract and
/// refine at every evaluation (a rollback needs the checkpoint of the best evaluation).
pub fn checkpoint_every(phase: Phase, recipe: &Recipe) -> u64 {
    match phase {
        Phase::Main => recipe.run.checkpoint_every,
        _ => recipe.contract.eval_every,
    }
}

/// Whether something done every `every` steps falls on step `k` (1-based) of a phase of `steps`
/// steps: on the cadence, and always at the phase's last step.
pub fn due(k: u64, every: u64, steps: u64) -> bool {
    k == steps || (every > 0 && k.is_multiple_of(every))
}

/// The steps (1-based) of a phase of `steps` steps at which [`due`] holds.
pub fn cadence(steps: u64, every: u64) -> Vec<u64> {
    (1..=steps).filter(|&k| due(k, every, steps)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cadence_includes_the_last_step() {
        assert_eq!(cadence(120, 50), [50, 100, 120]);
        assert_eq!(cadence(100, 50), [50, 100]);
        assert_eq!(cadence(3, 0), [3]);
        assert!(cadence(0, 5).is_empty());
    }

    #[test]
    fn a_job_budget_is_filled_with_the_phases_at_their_shares() {
        let recipe = Recipe::default();
        for job in [1, 7, 100, 400, 533, 1000, 12_345] {
            let mut laid = recipe.clone();
            laid.main.steps = main_for_job(&recipe, job);
            let s = PhaseSteps::new(&laid);
            assert!(s.training() <= job, "{job}: {s:?}");
            laid.main.steps += 1;
            assert!(
                PhaseSteps::new(&laid).training() > job,
                "{job}: main is the largest that fits"
            );
        }
        let mut laid = recipe.clone();
        laid.main.steps = main_for_job(&recipe, 400);
        let s = PhaseSteps::new(&laid);
        assert_eq!((s.main, s.contract, s.refine, s.training()), (300, 80, 20, 400));
    }

    #[test]
    fn the_default_budget_splits_main_contract_and_refine() {
        let s = PhaseSteps::new(&Recipe::default());
        assert_eq!((s.validate, s.main, s.contract, s.refine), (30, 400, 107, 26));
        assert!((s.contract as f64 / s.training() as f64 - 0.2).abs() < 0.01);
        let mut plain = Recipe::default();
        plain.run.phases = vec![Phase::Main];
        let s = PhaseSteps::new(&plain);
        assert_eq!((s.validate, s.main, s.contract, s.refine), (0, 400, 0, 0));
    }
}
