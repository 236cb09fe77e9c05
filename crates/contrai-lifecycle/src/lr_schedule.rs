//! How a phase's learning rate runs — the one place the run and `contrai plan` both ask.
//!
//! | phase | schedule |
//! | --- | --- |
//! | validate | constant `validate.lr` |
//! | main | linear warmup over `main.warmup` of main's steps, then `main.schedule` (cosine by default) laid over main + contract + refine, so that main ends mid-decay and contraction has an LR to anneal |
//! | contract | linear, **no warmup**, from the LR it enters with down to `main.min_lr` × [`CONTRACT_FLOOR`] |
//! | refine | linear from the LR it enters with down to 0, over its steps plus any a rolled-back contraction left unspent |
//!
//! The LR a step runs at is the schedule's value times the run's `lr_scale` (lowered by plateau
//! cuts and non-finite rollbacks). "The LR it enters with" is the last step's LR with that scale
//! taken out — after a rollback, the LR the restored checkpoint trained at.

use contrai_recipe::schedule::warmup_steps;
use contrai_recipe::{Decay, Phase, Recipe, Schedule};
use contrai_run::{LrSegment, LrShape};

use crate::budget::PhaseSteps;

/// Contraction anneals linearly from the LR it enters with down to `min_lr` × this.
pub const CONTRACT_FLOOR: f64 = 0.1;

/// A phase's LR schedule, from its first step (k = 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PhaseLr {
    /// One LR throughout (validate's check; diagnose trains nothing).
    Constant(f64),
    /// Main's warmup and decay.
    Main(Schedule),
    /// A straight line over `steps` steps, no warmup.
    Anneal {
        /// LR of the first step.
        from: f64,
        /// LR of the last step.
        to: f64,
        /// Steps of the line.
        steps: u64,
    },
}

impl PhaseLr {
    /// The schedule of `phase` over `steps` steps, entered at LR `lr0` (unscaled).
    pub fn new(phase: Phase, recipe: &Recipe, steps: u64, lr0: f64) -> PhaseLr {
        match phase {
            Phase::Validate => PhaseLr::Constant(recipe.validate.lr),
            Phase::Diagnose => PhaseLr::Constant(lr0),
            Phase::Main => PhaseLr::Main(main_schedule(recipe)),
            Phase::Contract => PhaseLr::Anneal {
                from: lr0,
                to: recipe.main.min_lr * CONTRACT_FLOOR,
                steps,
            },
            Phase::Refine => PhaseLr::Anneal {
                from: lr0,
                to: 0.0,
                steps,
            },
        }
    }

    /// The (unscaled) LR of step `k` (0-based) of the phase.
    pub fn at(&self, k: u64) -> f64 {
        match *self {
            PhaseLr::Constant(lr) => lr,
            PhaseLr::Main(s) => s.lr(k),
            PhaseLr::Anneal { from, to, steps } => linear(from, to, k, steps),
        }
    }

    /// The schedule's pieces over `steps` steps starting at global step `start`.
    pub fn segments(&self, start: u64, steps: u64) -> Vec<LrSegment> {
        let last = steps.saturating_sub(1);
        match *self {
            PhaseLr::Constant(lr) => vec![segment(start, start + steps, LrShape::Constant, lr, lr)],
            PhaseLr::Anneal { .. } => vec![segment(
                start,
                start + steps,
                LrShape::Linear,
                self.at(0),
                self.at(last),
            )],
            PhaseLr::Main(s) => {
                let mut out = Vec::new();
                if s.warmup > 0 {
                    let end = s.warmup - 1;
                    out.push(segment(
                        start,
                        start + s.warmup,
                        LrShape::Warmup,
                        s.lr(0),
                        s.lr(end),
                    ));
                }
                let shape = match s.decay {
                    Decay::Cosine => LrShape::Cosine,
                    Decay::Linear => LrShape::Linear,
                    Decay::Constant => LrShape::Constant,
                };
                out.push(segment(
                    start + s.warmup,
                    start + steps,
                    shape,
                    s.lr(s.warmup),
                    s.lr(last),
                ));
                out
            }
        }
    }
}

/// The main phase's schedule: warmup over `main.warmup` of main's steps, then the decay laid over
/// the whole training budget (main + contract + refine), so that main ends where contraction takes
/// the LR on down — a decay that reached `min_lr` within main would leave contraction nothing to
/// anneal. Main's share of it ends early when the conductor ends main.
pub fn main_schedule(recipe: &Recipe) -> Schedule {
    let m = &recipe.main;
    Schedule {
        peak: m.lr,
        floor: m.min_lr,
        warmup: warmup_steps(m.steps, m.warmup),
        steps: PhaseSteps::new(recipe).training(),
        decay: m.schedule,
    }
}

/// The LR of step `k` (0-based) of a linear anneal over `steps` steps from `from` to `to`.
pub fn linear(from: f64, to: f64, k: u64, steps: u64) -> f64 {
    if steps <= 1 {
        return to;
    }
    from + (to - from) * (k.min(steps - 1) as f64 / (steps - 1) as f64)
}

fn segment(from: u64, to: u64, shape: LrShape, lr_start: f64, lr_end: f64) -> LrSegment {
    LrSegment {
        from_step: from,
        to_step: to.saturating_sub(1).max(from),
        shape,
        lr_start,
        lr_end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_anneal_hits_both_ends() {
        assert_eq!(linear(1e-3, 0.0, 0, 11), 1e-3);
        assert!((linear(1e-3, 0.0, 5, 11) - 5e-4).abs() < 1e-15);
        assert_eq!(linear(1e-3, 0.0, 10, 11), 0.0);
        assert_eq!(linear(1e-3, 0.0, 0, 1), 0.0);
    }

    #[test]
    fn contract_anneals_from_its_entry_lr_to_the_floor_with_no_warmup() {
        let r = Recipe::default();
        let lr = PhaseLr::new(Phase::Contract, &r, 100, 3e-4);
        assert_eq!(lr.at(0), 3e-4, "no warmup: the first step runs at the entry LR");
        assert!((lr.at(99) - r.main.min_lr * CONTRACT_FLOOR).abs() < 1e-18);
        let seg = lr.segments(500, 100);
        assert_eq!(seg.len(), 1);
        assert_eq!(
            (seg[0].from_step, seg[0].to_step, seg[0].shape),
            (500, 599, LrShape::Linear)
        );
        assert_eq!(seg[0].lr_start, lr.at(0));
        assert_eq!(seg[0].lr_end, lr.at(99));
    }

    #[test]
    fn main_warms_up_then_decays_over_the_whole_budget() {
        let r = Recipe::default();
        let lr = PhaseLr::new(Phase::Main, &r, 400, 0.0);
        let seg = lr.segments(30, 400);
        assert_eq!(seg[0].shape, LrShape::Warmup);
        assert_eq!((seg[0].from_step, seg[0].to_step), (30, 41), "3 % of 400 steps");
        assert_eq!(seg[1].shape, LrShape::Cosine);
        assert!(
            seg[1].lr_end > 5.0 * r.main.min_lr,
            "main ends mid-decay: {}",
            seg[1].lr_end
        );
    }
}
