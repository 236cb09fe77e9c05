//! The programme before the compute — and after each phase starts, the programme as it now
//! stands: `plan.json` and `contrai plan`. Steps from [`PhaseSteps`], LR segments from
//! [`PhaseLr`], cadence from [`crate::budget`]; a phase already entered shows the run's start,
//! steps and LR instead of the plan's (main ended early, contraction rolled back).

use contrai_recipe::{Phase, Recipe};
use contrai_run::{PhasePlan, Plan, RunPlan};
use serde::{Deserialize, Serialize};

use crate::budget::{PhaseSteps, cadence, checkpoint_every};
use crate::lr_schedule::PhaseLr;

/// Below this many parameters a long contraction programme rarely pays.
pub const SMALL_MODEL_PARAMS: u64 = 300_000_000;
/// Below this many training samples fine-tuning rarely generalises.
pub const FEW_SAMPLES: u64 = 1_000;

/// A phase as the run entered it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Entered {
    /// The phase.
    pub phase: Phase,
    /// Its first global step.
    pub start: u64,
    /// Its steps (the steps it ran, once it ended early).
    pub steps: u64,
    /// The (unscaled) LR it entered with.
    pub lr0: f64,
}

/// The plan of `recipe` for `train_samples` training samples (when known), with the phases in
/// `entered` as the run entered them.
pub fn plan(recipe: &Recipe, train_samples: Option<u64>, entered: &[Entered]) -> Plan {
    let steps = PhaseSteps::new(recipe);
    let m = &recipe.main;
    let (mut at, mut lr0) = (0, m.lr);
    let mut phases = Vec::new();
    for phase in recipe.run.phases.iter().copied() {
        let seen = entered.iter().find(|e| e.phase == phase);
        let (start, n, from) = seen.map_or((at, steps.of(phase), lr0), |e| (e.start, e.steps, e.lr0));
        let lr = PhaseLr::new(phase, recipe, n, from);
        let batch = effective_batch(phase, recipe);
        phases.push(PhasePlan {
            name: phase,
            purpose: purpose(phase).into(),
            start_step: start,
            steps: n,
            batch,
            samples: n * batch,
            lr: if n > 0 { lr.segments(start, n) } else { Vec::new() },
            dropout_scale: match phase {
                Phase::Contract | Phase::Refine => recipe.contract.dropout_scale,
                _ => 1.0,
            },
            entered: seen.is_some(),
        });
        at = start + n;
        if phase.trains() && n > 0 {
            lr0 = lr.at(n - 1);
        }
    }
    let total = steps.training();
    let parameters = recipe.parameter_count(2);
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
        gradient_checkpointing: recipe.model.gradient_checkpointing,
        advice: advice(recipe, parameters, train_samples, total),
    }
}

/// `plan.json`: the plan, the phases trained and the planned checkpoint steps (main's start, then
/// each training phase's checkpoint cadence, its last step included).
pub fn run_plan(recipe: &Recipe, train_samples: u64, entered: &[Entered]) -> RunPlan {
    let plan = plan(recipe, Some(train_samples), entered);
    let mut checkpoints = Vec::new();
    for p in plan.phases.iter().filter(|p| p.name.trains()) {
        if p.name == Phase::Main {
            checkpoints.push(p.start_step);
        }
        let every = checkpoint_every(p.name, recipe);
        checkpoints.extend(cadence(p.steps, every).into_iter().map(|k| p.start_step + k));
    }
    checkpoints.dedup();
    RunPlan {
        plan,
        trained_phases: recipe.run.phases.clone(),
        checkpoint_steps: checkpoints,
        keep_last: recipe.run.keep_last,
    }
}

/// Samples an optimizer step of `phase` sees.
fn effective_batch(phase: Phase, recipe: &Recipe) -> u64 {
    let m = &recipe.main;
    let per_device = match phase {
        Phase::Validate => return recipe.validate.batch as u64,
        Phase::Diagnose => return 0,
        Phase::Main => m.batch,
        Phase::Contract | Phase::Refine => recipe.contract.batch,
    };
    (per_device * m.devices * m.accumulate) as u64
}

/// What happens in a phase, in words.
fn purpose(phase: Phase) -> &'static str {
    match phase {
        Phase::Validate => {
            "prove the pipeline: one batch's loss must fall beyond its noise (−90 % expected), one eval, one checkpoint round trip"
        }
        Phase::Main => "the main training, watched by the live doctor",
        Phase::Diagnose => "doctor's findings; per-module pruning sensitivity; sparsity caps",
        Phase::Contract => {
            "anneal LR (no warmup), smaller batch, dropout × 0.5, drop the noisiest samples; roll back when validation worsens"
        }
        Phase::Refine => "short anneal on filtered data, the single holdout evaluation",
    }
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
    use contrai_run::LrShape;

    #[test]
    fn the_default_plan_splits_steps_by_the_budgets() {
        let p = plan(&Recipe::default(), None, &[]);
        let names: Vec<Phase> = p.phases.iter().map(|p| p.name).collect();
        assert_eq!(names, Phase::all());
        let steps: u64 = p.phases[1..].iter().map(|p| p.steps).sum();
        assert_eq!(steps, p.total_steps);
        assert!((p.contract_share - 0.2).abs() < 0.01, "{}", p.contract_share);
        let c = &p.phases[3];
        assert_eq!(c.lr.len(), 1, "contract has no warmup");
        assert_eq!(c.lr[0].shape, LrShape::Linear);
        assert_eq!(
            c.lr[0].lr_start,
            p.phases[1].lr.last().unwrap().lr_end,
            "contract starts from main's LR"
        );
        assert_eq!(c.batch, 16);
        assert_eq!(p.phases[1].lr[0].shape, LrShape::Warmup);
        assert_eq!(
            p.phases[1].lr[0].from_step, 30,
            "main starts after validate's 30 steps"
        );
        assert_eq!(p.phases[1].lr[0].to_step, 41, "3 % of 400 steps");
        assert_eq!(p.phases[4].lr[0].lr_end, 0.0, "refine anneals to 0");
        assert_eq!(
            p.phases[4].lr[0].lr_start, c.lr[0].lr_end,
            "refine starts where contract ends"
        );
        assert!(p.phases.iter().all(|p| !p.entered));
    }

    #[test]
    fn a_rolled_back_contraction_replans_refine_from_the_restored_lr() {
        let r = Recipe::default();
        let before = plan(&r, None, &[]);
        // Contract entered at 430 and rolled back at 470: refine gets its 26 steps + 67 unspent,
        // from the LR the restored checkpoint trained at.
        let entered = [
            Entered {
                phase: Phase::Main,
                start: 30,
                steps: 400,
                lr0: r.main.lr,
            },
            Entered {
                phase: Phase::Contract,
                start: 430,
                steps: 40,
                lr0: 2e-4,
            },
            Entered {
                phase: Phase::Refine,
                start: 470,
                steps: 26 + 67,
                lr0: 1.5e-4,
            },
        ];
        let after = plan(&r, None, &entered);
        let refine = &after.phases[4];
        assert!(refine.entered);
        assert_eq!((refine.start_step, refine.steps), (470, 93));
        assert_eq!(refine.lr[0].lr_start, 1.5e-4);
        assert_eq!(refine.lr[0].to_step, 470 + 93 - 1);
        assert_ne!(refine.steps, before.phases[4].steps);
        assert_eq!(after.phases[3].steps, 40, "the contraction's steps as run");
    }

    #[test]
    fn plan_json_flattens_the_plan_and_lists_checkpoints() {
        let p = run_plan(&Recipe::default(), 3000, &[]);
        let v = serde_json::to_value(&p).unwrap();
        assert!(
            v["phases"]
                .as_array()
                .unwrap()
                .iter()
                .any(|ph| ph["name"] == "main")
        );
        assert_eq!(v["trained_phases"][1], "main");
        assert_eq!(v["checkpoint_every"], 50);
        let ck = &p.checkpoint_steps;
        assert_eq!(ck[0], 30, "main starts after validate with a checkpoint");
        assert_eq!(ck[1], 80);
        assert_eq!(*ck.last().unwrap(), 30 + 533, "the end of refine");
    }

    #[test]
    fn a_plain_run_plans_main_alone() {
        let mut r = Recipe::default();
        r.run.phases = vec![Phase::Main];
        let p = plan(&r, None, &[]);
        assert_eq!(p.phases.len(), 1);
        assert_eq!(p.total_steps, r.main.steps);
        assert_eq!(p.phases[0].start_step, 0);
    }

    #[test]
    fn the_default_transformer_has_the_expected_size_and_advice() {
        let r = Recipe::default();
        // 8192×128 + 128×128 embeddings; 2 blocks of 198,272; final norm 256; head 258.
        assert_eq!(r.parameter_count(2), 1_048_576 + 16_384 + 2 * 198_272 + 256 + 258);
        let p = plan(&r, Some(800), &[]);
        assert!(p.advice.iter().any(|a| a.contains("< 300 M")));
        assert!(p.advice.iter().any(|a| a.contains("< 1,000")));
    }
}
