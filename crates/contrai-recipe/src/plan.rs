//! The phase plan: steps, samples, LR segments and cadence of each lifecycle phase, the model's
//! size, and the advice that follows from them (`../shared/DESIGN.md` §1).

use serde::Serialize;

use crate::recipe::Recipe;
use crate::schedule::{Decay, Schedule, warmup_steps};

/// Steps of the `validate` phase's overfit-one-batch check.
pub const VALIDATE_STEPS: u64 = 30;
/// Contraction anneals linearly from the LR it enters with down to `min_lr` × this.
pub const CONTRACT_FLOOR: f64 = 0.1;
/// Below this many parameters a long contraction programme rarely pays.
pub const SMALL_MODEL_PARAMS: u64 = 300_000_000;
/// Below this many training samples fine-tuning rarely generalises.
pub const FEW_SAMPLES: u64 = 1_000;

/// One straight or curved piece of the learning-rate schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LrSegment {
    /// First step (global numbering).
    pub from_step: u64,
    /// Last step.
    pub to_step: u64,
    /// `warmup`, `cosine`, `linear` or `constant`.
    pub shape: &'static str,
    /// LR at the first step.
    pub lr_start: f64,
    /// LR at the last step.
    pub lr_end: f64,
}

/// One phase of the lifecycle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhasePlan {
    /// `validate`, `main`, `diagnose`, `contract` or `refine`.
    pub name: &'static str,
    /// What happens in it.
    pub purpose: &'static str,
    /// First global step.
    pub start_step: u64,
    /// Optimizer steps.
    pub steps: u64,
    /// Samples an optimizer step (effective batch).
    pub batch: u64,
    /// Samples seen.
    pub samples: u64,
    /// The LR schedule.
    pub lr: Vec<LrSegment>,
    /// Dropout multiplier.
    pub dropout_scale: f64,
}

/// The whole plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Phases in order.
    pub phases: Vec<PhasePlan>,
    /// Optimizer steps of main + contract + refine.
    pub total_steps: u64,
    /// Contract's share of those.
    pub contract_share: f64,
    /// Evaluate every this many steps.
    pub eval_every: u64,
    /// Checkpoint every this many steps.
    pub checkpoint_every: u64,
    /// Trainable parameters of the model (2 classes assumed when unknown).
    pub parameters: u64,
    /// Advice from the rules of practice.
    pub advice: Vec<String>,
}

impl Plan {
    /// Plans a recipe; `train_samples` (when known) adds epochs and data-size advice.
    pub fn new(recipe: &Recipe, train_samples: Option<u64>) -> Plan {
        let main = &recipe.main;
        let steps = PhaseSteps::new(recipe);
        let total = steps.main + steps.contract + steps.refine;
        let schedule = main_schedule(recipe);
        let end_lr = schedule.lr(main.steps.saturating_sub(1));
        let main_batch = main.effective_batch() as u64;
        let contract_batch = (recipe.contract.batch * main.devices * main.accumulate) as u64;
        let v = &recipe.validate;
        let (m0, c0, r0) = (
            steps.validate,
            steps.validate + steps.main,
            steps.validate + steps.main + steps.contract,
        );
        let mut phases = vec![
            phase(
                "validate",
                "prove the pipeline: overfit one batch (loss −90 %), one eval, one checkpoint round trip",
                0,
                steps.validate,
                v.batch as u64,
                vec![seg(0, steps.validate, "constant", v.lr, v.lr)],
                0.0,
            ),
            phase(
                "main",
                "the main training, watched by the live doctor",
                m0,
                steps.main,
                main_batch,
                main_segments(&schedule, m0, main.steps),
                1.0,
            ),
            phase(
                "diagnose",
                "doctor's findings; per-module pruning sensitivity; sparsity caps",
                c0,
                0,
                0,
                Vec::new(),
                1.0,
            ),
            phase(
                "contract",
                "anneal LR (no warmup), smaller batch, dropout × 0.5, drop the noisiest samples; roll back when validation worsens",
                c0,
                steps.contract,
                contract_batch,
                vec![seg(
                    c0,
                    c0 + steps.contract,
                    "linear",
                    end_lr,
                    main.min_lr * CONTRACT_FLOOR,
                )],
                recipe.contract.dropout_scale,
            ),
            phase(
                "refine",
                "short anneal on filtered data, the single holdout evaluation",
                r0,
                steps.refine,
                contract_batch,
                vec![seg(
                    r0,
                    r0 + steps.refine,
                    "linear",
                    main.min_lr * CONTRACT_FLOOR,
                    0.0,
                )],
                recipe.contract.dropout_scale,
            ),
        ];
        phases.retain(|p| recipe.run.has_phase(p.name));
        phases.iter_mut().for_each(|p| p.samples = p.steps * p.batch);
        let parameters = parameter_count(recipe, 2);
        let advice = advice(recipe, parameters, train_samples, total);
        Plan {
            phases,
            total_steps: total,
            contract_share: if total > 0 {
                steps.contract as f64 / total as f64
            } else {
                0.0
            },
            eval_every: recipe.run.eval_every,
            checkpoint_every: recipe.run.checkpoint_every,
            parameters,
            advice,
        }
    }
}

/// Optimizer steps each phase plans (0 for a phase the recipe does not run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PhaseSteps {
    /// Steps of overfitting one batch.
    pub validate: u64,
    /// Main steps (an upper bound: the controller may end main early).
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
        let has = |p: &str| recipe.run.has_phase(p);
        let c = if has("contract") {
            recipe.contract.budget
        } else {
            0.0
        };
        let r = if has("refine") { recipe.refine.budget } else { 0.0 };
        let main = recipe.main.steps;
        let total = (main as f64 / (1.0 - c - r)).round() as u64;
        let contract = (total as f64 * c).round() as u64;
        PhaseSteps {
            validate: if has("validate") { recipe.validate.steps } else { 0 },
            main,
            contract,
            refine: if has("refine") {
                total.saturating_sub(main + contract)
            } else {
                0
            },
        }
    }
}

/// The main phase's schedule: warmup over `main.warmup` of main's steps, then the decay laid over
/// the whole training budget (main + contract + refine), so that main ends where contraction takes
/// the LR on down — a decay that reached `min_lr` within main would leave contraction nothing to
/// anneal. Main's share of it ends early when the controller ends main.
pub fn main_schedule(recipe: &Recipe) -> Schedule {
    let m = &recipe.main;
    let s = PhaseSteps::new(recipe);
    Schedule {
        peak: m.lr,
        floor: m.min_lr,
        warmup: warmup_steps(m.steps, m.warmup),
        steps: s.main + s.contract + s.refine,
        decay: m.schedule,
    }
}

fn main_segments(s: &Schedule, at: u64, steps: u64) -> Vec<LrSegment> {
    let mut out = Vec::new();
    if s.warmup > 0 {
        out.push(seg(at, at + s.warmup, "warmup", s.lr(0), s.lr(s.warmup - 1)));
    }
    let shape = match s.decay {
        Decay::Cosine => "cosine",
        Decay::Linear => "linear",
        Decay::Constant => "constant",
    };
    out.push(seg(
        at + s.warmup,
        at + steps,
        shape,
        s.lr(s.warmup),
        s.lr(steps.saturating_sub(1)),
    ));
    out
}

fn seg(from: u64, to: u64, shape: &'static str, lr_start: f64, lr_end: f64) -> LrSegment {
    LrSegment {
        from_step: from,
        to_step: to.saturating_sub(1).max(from),
        shape,
        lr_start,
        lr_end,
    }
}

#[allow(clippy::too_many_arguments)]
fn phase(
    name: &'static str,
    purpose: &'static str,
    start: u64,
    steps: u64,
    batch: u64,
    lr: Vec<LrSegment>,
    dropout_scale: f64,
) -> PhasePlan {
    PhasePlan {
        name,
        purpose,
        start_step: start,
        steps,
        batch,
        samples: 0,
        lr,
        dropout_scale,
    }
}

/// Trainable parameters of the recipe's model for `classes` output classes.
pub fn parameter_count(recipe: &Recipe, classes: u64) -> u64 {
    let m = &recipe.model;
    let (d, f, l) = (m.d_model as u64, m.ffn as u64, m.layers as u64);
    if m.kind == "mlp" {
        // Hidden width is `ffn`; the input width is the feature count, unknown here: count the
        // hidden stack after the first layer and the head.
        return l.saturating_sub(1) * (f * f + f) + f * classes + classes;
    }
    let embeddings = (m.vocab as u64 + m.seq_len as u64) * d;
    let attention = 4 * (d * d + d);
    let feed_forward = d * f + f + f * d + d;
    let norms = 2 * 2 * d;
    embeddings + l * (attention + feed_forward + norms) + 2 * d + d * classes + classes
}

fn advice(recipe: &Recipe, parameters: u64, train_samples: Option<u64>, total: u64) -> Vec<String> {
    let mut out = Vec::new();
    if parameters < SMALL_MODEL_PARAMS {
        out.push(format!(
            "{parameters} parameters (< 300 M): a long contraction programme rarely pays at this size; training the smaller target architecture directly is usually as good (contracting is still allowed)"
        ));
    }
    let eb = recipe.main.effective_batch();
    if !(16..=64).contains(&eb) {
        out.push(format!("effective batch {eb} is outside the recommended 16–64"));
    }
    if !(0.02..=0.05).contains(&recipe.main.warmup) {
        out.push(format!(
            "warmup {:.1} % is outside the recommended 2–5 %",
            100.0 * recipe.main.warmup
        ));
    }
    if recipe.run.checkpoint_every > 500 {
        out.push(format!(
            "checkpoint every {} steps: every ~50 steps loses minutes, not hours, on preemption",
            recipe.run.checkpoint_every
        ));
    }
    if let Some(n) = train_samples {
        if n < FEW_SAMPLES {
            out.push(format!("{n} training samples (< 1,000): fine-tuning cannot generalise from so few; collect more data first"));
        }
        let epochs = (total * eb as u64) as f64 / n.max(1) as f64;
        out.push(format!("{epochs:.1} epochs over {n} training samples"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_plan_splits_steps_by_the_budgets() {
        let p = Plan::new(&Recipe::default(), None);
        let names: Vec<&str> = p.phases.iter().map(|p| p.name).collect();
        assert_eq!(names, ["validate", "main", "diagnose", "contract", "refine"]);
        let steps: u64 = p.phases[1..].iter().map(|p| p.steps).sum();
        assert_eq!(steps, p.total_steps);
        assert!((p.contract_share - 0.2).abs() < 0.01, "{}", p.contract_share);
        let c = &p.phases[3];
        assert_eq!(c.lr.len(), 1, "contract has no warmup");
        assert_eq!(c.lr[0].shape, "linear");
        assert!(
            (c.lr[0].lr_start - p.phases[1].lr.last().unwrap().lr_end).abs() < 1e-15,
            "contract starts from main's LR"
        );
        assert_eq!(c.batch, 16);
        assert_eq!(p.phases[1].lr[0].shape, "warmup");
        assert_eq!(
            p.phases[1].lr[0].from_step, 30,
            "main starts after validate's 30 steps"
        );
        assert_eq!(p.phases[1].lr[0].to_step, 41, "3 % of 400 steps");
        assert_eq!(p.phases[4].lr[0].lr_end, 0.0, "refine anneals to 0");
        let main_end = p.phases[1].lr.last().unwrap().lr_end;
        assert!(
            main_end > 5.0 * Recipe::default().main.min_lr,
            "main ends mid-decay: {main_end}"
        );
    }

    #[test]
    fn a_plain_run_plans_main_alone() {
        let mut r = Recipe::default();
        r.run.phases = vec!["main".into()];
        let p = Plan::new(&r, None);
        assert_eq!(p.phases.len(), 1);
        assert_eq!(p.total_steps, r.main.steps);
        assert_eq!(p.phases[0].start_step, 0);
    }

    #[test]
    fn the_default_transformer_has_the_expected_size_and_advice() {
        let r = Recipe::default();
        // 8192×128 + 128×128 embeddings; 2 blocks of 198,272; final norm 256; head 258.
        assert_eq!(
            parameter_count(&r, 2),
            1_048_576 + 16_384 + 2 * 198_272 + 256 + 258
        );
        let p = Plan::new(&r, Some(800));
        assert!(p.advice.iter().any(|a| a.contains("< 300 M")));
        assert!(p.advice.iter().any(|a| a.contains("< 1,000")));
    }
}
