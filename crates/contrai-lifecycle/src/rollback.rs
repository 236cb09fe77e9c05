//! What a rollback restores — the three ways the conductor sends the model back to a checkpoint.
//!
//! | trigger | checkpoint | restores | then |
//! | --- | --- | --- | --- |
//! | a non-finite loss or gradient norm, or a non-finite validation loss at an evaluation | the newest that passes its sums | everything: weights, optimizer, masks, data position, counters, this state; `metrics.jsonl` cut back to it (`decisions.jsonl` keeps the rollback's reason) | the same steps again at the LR × `guards.nan_lr_factor`; after `guards.nan_retries` rollbacks the run stops |
//! | overfitting in main (the live doctor) | the run's best (lowest validation loss at a checkpoint) | weights, optimizer and masks; steps and data order run on | main ends; the next phase anneals from the LR that checkpoint trained at |
//! | the contraction guard ([`crate::contract::guard`]) | the contraction's best (its entry, or a better evaluation since) | weights, optimizer and masks (the sparsity series shows the masks going back) | contraction ends; refine takes its unspent steps, from the LR that checkpoint trained at |

use contrai_recipe::{Phase, Recipe};
use contrai_run::{Decision, DecisionKind, MetricsRow};
use serde_json::json;

use crate::awaiting::Await;
use crate::conductor::Conductor;
use crate::error::Result;
use crate::protocol::{Failure, Request, RestorePoint, RestoreScope, Turn};
use crate::state::{Stage, State};

/// What was not finite.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NonFinite {
    /// A training step's loss or gradient norm (the engine did not apply the step).
    Step {
        /// The step's loss, when the engine logs it.
        loss: Option<f32>,
        /// The step's gradient norm, when the engine logs it.
        grad_norm: Option<f32>,
    },
    /// The validation loss of an evaluation: the weights are finite but the forward overflows
    /// (a half-precision model whose activations outgrew its range). The steps were applied.
    Eval {
        /// The validation loss.
        val_loss: f32,
    },
}

impl NonFinite {
    /// What was seen, for the decision's reason.
    fn seen(&self) -> String {
        match self {
            NonFinite::Step { loss, grad_norm } => {
                format!(
                    "non-finite loss ({}) or gradient norm ({})",
                    shown(*loss),
                    shown(*grad_norm)
                )
            }
            NonFinite::Eval { val_loss } => format!("non-finite validation loss ({val_loss})"),
        }
    }

    /// The values seen, for the decision's evidence.
    fn evidence(&self) -> serde_json::Map<String, serde_json::Value> {
        let v = match self {
            NonFinite::Step { loss, grad_norm } => {
                json!({"train_loss": shown(*loss), "grad_norm": shown(*grad_norm)})
            }
            NonFinite::Eval { val_loss } => json!({"val_loss": val_loss.to_string()}),
        };
        let serde_json::Value::Object(map) = v else {
            unreachable!("an object literal")
        };
        map
    }
}

/// A logged value as the evidence shows it.
fn shown(x: Option<f32>) -> String {
    x.map_or("not logged".to_string(), |v| v.to_string())
}

/// The non-finite rule: back to the last good checkpoint with the LR scale × `nan_lr_factor` and
/// one more retry counted — `Ok((decision, new scale, retries))` — or, when the retries are
/// spent, `Err(decision)`: the run stops.
pub fn nonfinite(
    state: &State,
    step: u64,
    what: NonFinite,
    recipe: &Recipe,
) -> Result<(Decision, f64, u32), Decision> {
    let g = &recipe.guards;
    let phase = state.phase;
    let retries = state.nan_retries;
    let seen = what.seen();
    let mut evidence = what.evidence();
    evidence.insert("retries".into(), retries.into());
    evidence.insert("max_retries".into(), g.nan_retries.into());
    let evidence = serde_json::Value::Object(evidence);
    if retries >= g.nan_retries {
        let reason = format!("{seen} again after {retries} retries: giving up");
        return Err(Decision::new(
            step,
            phase,
            DecisionKind::AbortNonfinite,
            reason,
            evidence,
        ));
    }
    let (old, scale, retry) = (state.lr_scale, state.lr_scale * g.nan_lr_factor, retries + 1);
    let reason = format!(
        "{seen}: back to the last good checkpoint, LR × {} (scale {old} → {scale}), retry {retry} of {}",
        g.nan_lr_factor, g.nan_retries
    );
    Ok((
        Decision::new(step, phase, DecisionKind::RollbackNonfinite, reason, evidence),
        scale,
        retry,
    ))
}

/// The step of the best checkpoint an ended phase restores: the contraction's best in contract,
/// the run's best otherwise (`None`: nothing to restore).
pub fn best_checkpoint(state: &State) -> Option<u64> {
    match state.phase {
        Phase::Contract => state.contraction.best.map(|b| b.0),
        _ => state.best.map(|b| b.0),
    }
}

/// Steps a contraction rolled back early leaves unspent: the final anneal takes them, so the
/// budget still trains the restored model instead of being dropped with the contraction.
pub fn unspent(state: &State) -> u64 {
    match state.phase {
        Phase::Contract => state.segment.end().saturating_sub(state.step),
        _ => 0,
    }
}

impl Conductor {
    /// A step with a non-finite loss or gradient norm (not applied by the engine: the decision
    /// is the step it would have been), or an evaluation with a non-finite loss.
    pub(crate) fn on_nonfinite(&mut self, what: NonFinite) -> Result<Turn> {
        let step = match what {
            NonFinite::Step { .. } => self.state.step + 1,
            NonFinite::Eval { .. } => self.state.step,
        };
        match nonfinite(&self.state, step, what, &self.recipe) {
            Err(d) => {
                let reason = d.reason.clone();
                Ok(self.fail(Vec::new(), Some(d), Failure::Diverged(reason)))
            }
            Ok((d, lr_scale, nan_retries)) => {
                let request = Request::Restore {
                    to: RestorePoint::Latest,
                    scope: RestoreScope::Everything,
                };
                let next = Await::NonfiniteRestored {
                    lr_scale,
                    nan_retries,
                };
                Ok(self.ask(vec![crate::Action::Record(d)], request, next))
            }
        }
    }

    /// The checkpoint is back: its state, with the lowered LR scale and the retry counted.
    pub(crate) fn on_nonfinite_restored(
        &mut self,
        state: State,
        history: &[MetricsRow],
        lr_scale: f64,
        nan_retries: u32,
    ) -> Result<Turn> {
        self.adopt(state, history);
        self.state.lr_scale = lr_scale;
        self.state.nan_retries = nan_retries;
        self.after_rollback()
    }

    /// The best checkpoint's weights are back: the next phase anneals from the LR it trained at,
    /// and its masks are the sparsity now.
    pub(crate) fn on_best_restored(&mut self, restored: State) -> Result<Turn> {
        self.state.lr = restored.lr;
        self.state.sparsity = restored.sparsity;
        self.state.stage = Stage::Ended { restore_best: false };
        self.leave(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonfinite_retries_are_bounded_and_lower_the_lr() {
        let r = Recipe::default();
        let mut s = State::fresh(Phase::Main);
        for i in 1..=3 {
            let what = NonFinite::Step {
                loss: Some(f32::NAN),
                grad_norm: None,
            };
            let (d, scale, retries) = nonfinite(&s, 10, what, &r).unwrap();
            assert_eq!(d.kind, DecisionKind::RollbackNonfinite);
            assert_eq!(retries, i);
            (s.lr_scale, s.nan_retries) = (scale, retries);
        }
        assert!((s.lr_scale - 0.125).abs() < 1e-12);
        let eval = NonFinite::Eval {
            val_loss: f32::INFINITY,
        };
        let d = nonfinite(&s, 10, eval, &r).unwrap_err();
        assert_eq!(d.kind, DecisionKind::AbortNonfinite);
        assert!(
            d.reason.starts_with("non-finite validation loss (inf) again"),
            "{}",
            d.reason
        );
        assert_eq!(d.evidence["val_loss"], "inf");
    }

    #[test]
    fn a_contraction_rolled_back_early_leaves_its_unspent_steps() {
        let mut s = State::fresh(Phase::Contract);
        s.segment.start = 430;
        s.segment.steps = 107;
        s.step = 470;
        assert_eq!(unspent(&s), 67);
        s.phase = Phase::Refine;
        assert_eq!(unspent(&s), 0);
    }
}
