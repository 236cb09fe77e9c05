//! `plan.json`: the lifecycle plan of `contrai_recipe::Plan` (steps, LR segments, cadence of every
//! phase), plus what this trainer adds: the phases it runs and the steps it checkpoints.

use contrai_recipe::Recipe;
use serde::Serialize;

/// What `plan.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct RunPlan {
    /// The recipe's lifecycle plan.
    #[serde(flatten)]
    pub plan: contrai_recipe::Plan,
    /// Phases this run goes through.
    pub trained_phases: Vec<String>,
    /// Steps at which checkpoints are planned (main's start and end included; main may end early,
    /// which moves contract and refine forward).
    pub checkpoint_steps: Vec<u64>,
    /// Checkpoints kept besides the best.
    pub keep_last: u32,
}

impl RunPlan {
    /// The plan of `recipe` for `train_samples` training samples.
    pub fn new(recipe: &Recipe, train_samples: u64) -> RunPlan {
        RunPlan {
            plan: contrai_recipe::Plan::new(recipe, Some(train_samples)),
            trained_phases: recipe.run.phases.clone(),
            checkpoint_steps: planned_checkpoints(recipe),
            keep_last: recipe.run.keep_last,
        }
    }
}

/// Global steps of the planned checkpoints: main's start, then every `checkpoint_every` steps of
/// main and every `contract.eval_every` steps of contract and refine, each phase's end included.
fn planned_checkpoints(recipe: &Recipe) -> Vec<u64> {
    let s = contrai_recipe::plan::PhaseSteps::new(recipe);
    let mut out = vec![s.validate];
    let mut at = s.validate;
    for (steps, every) in [
        (s.main, recipe.run.checkpoint_every),
        (s.contract, recipe.contract.eval_every),
        (s.refine, recipe.contract.eval_every),
    ] {
        out.extend(cadence(steps, every).into_iter().map(|k| at + k));
        at += steps;
    }
    out.dedup();
    out
}

/// Steps (1-based counts) at which an action every `every` steps happens in `steps`, the last included.
pub fn cadence(steps: u64, every: u64) -> Vec<u64> {
    let mut v: Vec<u64> = match steps.checked_div(every) {
        Some(n) => (1..=n).map(|k| k * every).collect(),
        None => Vec::new(),
    };
    if steps > 0 && v.last() != Some(&steps) {
        v.push(steps);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cadence_includes_the_last_step() {
        assert_eq!(cadence(120, 50), [50, 100, 120]);
        assert_eq!(cadence(100, 50), [50, 100]);
        assert_eq!(cadence(3, 0), [3]);
    }

    #[test]
    fn plan_json_flattens_the_lifecycle_plan() {
        let p = RunPlan::new(&Recipe::default(), 3000);
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
        let ck = v["checkpoint_steps"].as_array().unwrap();
        assert_eq!(ck[0], 30, "main starts after validate with a checkpoint");
        assert_eq!(ck[1], 80);
        assert_eq!(
            ck.last().unwrap(),
            &serde_json::json!(30 + 533),
            "the end of refine"
        );
    }
}
