//! The end of the run, after the last phase: the final model exported and evaluated, the student
//! distilled and the int8 model made (when refine runs and the recipe asks), the int8 model kept
//! only when it costs at most `refine.max_drop` validation points, and the holdout read **once**,
//! last.

use contrai_recipe::{Phase, Quantize};
use contrai_run::{Decision, DecisionKind, Int8Eval};
use serde_json::json;

use crate::awaiting::{Await as Awaiting, FinishStep as Await, Int8Made};
use crate::conductor::Conductor;
use crate::error::{ConductorError, Result};
use crate::protocol::{Action, Int8Verdict, Observation, Request, Summary, Turn};

/// The int8 rule: kept when it loses at most `refine.max_drop` validation accuracy points.
pub fn int8_verdict(dense_accuracy: f32, int8_accuracy: f32, max_drop: f64) -> Int8Verdict {
    let drop_points = 100.0 * f64::from(dense_accuracy - int8_accuracy);
    Int8Verdict {
        kept: drop_points <= max_drop,
        drop_points,
    }
}

impl Conductor {
    /// Every phase is done: export the final model.
    pub(crate) fn finish(&mut self, out: Vec<Action>) -> Result<Turn> {
        self.state.stage = crate::state::Stage::Done;
        Ok(self.ask(out, Request::Export, Awaiting::Finish(Await::Exported)))
    }

    pub(crate) fn on_finish(&mut self, step: Await, obs: Observation) -> Result<Turn> {
        let refine = self.recipe.run.has_phase(Phase::Refine);
        let r = &self.recipe.refine;
        match (step, obs) {
            (Await::Exported, Observation::Exported { val_accuracy, .. }) => {
                if refine && r.distill.enabled {
                    let next = Awaiting::Finish(Await::Distilled { val_accuracy });
                    return Ok(self.ask(Vec::new(), Request::Distil, next));
                }
                Ok(self.quantize(Vec::new(), val_accuracy))
            }
            (Await::Distilled { val_accuracy }, obs @ Observation::Distilled { .. }) => {
                let d = self.distill_decision(&obs);
                Ok(self.quantize(vec![Action::Record(d)], val_accuracy))
            }
            (Await::Distilled { val_accuracy }, Observation::Declined { what, instead }) => {
                let d = self.declined(&what, &instead);
                Ok(self.quantize(vec![Action::Record(d)], val_accuracy))
            }
            (Await::Quantized { .. }, Observation::Declined { what, instead }) => {
                let d = self.declined(&what, &instead);
                let request = Request::ReadHoldout { int8: None };
                Ok(self.ask(
                    vec![Action::Record(d)],
                    request,
                    Awaiting::Finish(Await::Holdout { int8: None }),
                ))
            }
            (
                Await::Quantized { val_accuracy },
                Observation::Quantized {
                    val_accuracy: q,
                    bytes,
                    dense_bytes,
                    scheme,
                    file,
                },
            ) => {
                let verdict = int8_verdict(val_accuracy, q, r.max_drop);
                let request = Request::ReadHoldout { int8: Some(verdict) };
                let int8 = Some(Int8Made {
                    verdict,
                    val_accuracy: (q, val_accuracy),
                    bytes: (bytes, dense_bytes),
                    scheme,
                    file,
                });
                Ok(self.ask(Vec::new(), request, Awaiting::Finish(Await::Holdout { int8 })))
            }
            (
                Await::Holdout { int8 },
                Observation::HoldoutRead {
                    loss,
                    accuracy,
                    samples,
                    int8_accuracy,
                },
            ) => Ok(self.finished(int8, int8_accuracy, (loss, accuracy, samples))),
            (step, obs) => Err(ConductorError::Protocol(format!(
                "{obs:?} does not answer the end's {step:?}"
            ))),
        }
    }

    /// The int8 model when refine runs and the recipe asks for it; else straight to the holdout.
    fn quantize(&mut self, out: Vec<Action>, val_accuracy: f32) -> Turn {
        let r = &self.recipe.refine;
        if self.recipe.run.has_phase(Phase::Refine) && r.quantize == Quantize::Int8 {
            let block = Some(r.quantize_block).filter(|b| *b > 0);
            return self.ask(
                out,
                Request::Quantize { block },
                Awaiting::Finish(Await::Quantized { val_accuracy }),
            );
        }
        let request = Request::ReadHoldout { int8: None };
        self.ask(out, request, Awaiting::Finish(Await::Holdout { int8: None }))
    }

    /// What the engine did instead of a request it could not carry out.
    fn declined(&self, what: &str, instead: &str) -> Decision {
        Decision::new(
            self.state.step,
            Phase::Refine,
            DecisionKind::EngineSubstitute,
            format!("{what}: {instead}"),
            json!({"asked": what, "instead": instead}),
        )
    }

    fn distill_decision(&self, obs: &Observation) -> Decision {
        let Observation::Distilled {
            parameters,
            teacher_parameters,
            best_step,
            val_loss,
            val_accuracy,
        } = *obs
        else {
            unreachable!("called with a Distilled observation")
        };
        let d = &self.recipe.refine.distill;
        Decision::new(
            self.state.step,
            Phase::Refine,
            DecisionKind::Distill,
            format!(
                "student distilled from the refined model: {parameters} parameters (teacher {teacher_parameters}), best validation at its step {best_step}: loss {val_loss:.4}, accuracy {:.2} %; kept as final/{}",
                100.0 * val_accuracy,
                contrai_run::FINAL_STUDENT
            ),
            json!({"parameters": parameters, "teacher_parameters": teacher_parameters,
                   "best_step": best_step, "val_loss": val_loss, "val_accuracy": val_accuracy, "steps": d.steps,
                   "temperature": d.temperature, "w_ce": d.w_ce, "w_kd": d.w_kd}),
        )
    }

    /// The holdout was read: the int8 verdict and the holdout recorded, and the run is over.
    fn finished(
        &mut self,
        int8: Option<Int8Made>,
        int8_accuracy: Option<f32>,
        holdout: (f32, f32, usize),
    ) -> Turn {
        let (loss, accuracy, samples) = holdout;
        let phase = self.recipe.run.phases.last().copied().unwrap_or(Phase::Main);
        let step = self.state.step;
        let mut out = Vec::new();
        let int8 = int8.map(|made| {
            let eval = made.eval(int8_accuracy.unwrap_or(f32::NAN));
            out.push(Action::Record(self.int8_decision(step, phase, &made, &eval)));
            eval
        });
        out.push(Action::Record(Decision::new(
            step,
            phase,
            DecisionKind::Holdout,
            format!(
                "the holdout, read once: accuracy {:.2} %, loss {loss:.4} on {samples} samples",
                100.0 * accuracy
            ),
            json!({"holdout_accuracy": accuracy, "holdout_loss": loss, "samples": samples}),
        )));
        let s = &self.state;
        let summary = Summary {
            step,
            best: s.best,
            main_end: s.main_end.map(|(at, kind)| (at, kind.to_string())),
            planned_steps: self.steps.all(),
            int8,
        };
        self.ask(out, Request::Finish(Box::new(summary)), Awaiting::Over)
    }

    fn int8_decision(&self, step: u64, phase: Phase, made: &Int8Made, q: &Int8Eval) -> Decision {
        let max_drop = self.recipe.refine.max_drop;
        let (kind, what) = if q.kept {
            (DecisionKind::Int8, format!("kept as {}", made.file))
        } else {
            (
                DecisionKind::RefuseInt8,
                "refused: the model stays f32".to_string(),
            )
        };
        Decision::new(
            step,
            phase,
            kind,
            format!(
                "int8 ({}): validation accuracy {:.2} % → {:.2} % ({:+.2} points, limit −{} points), {} → {} bytes ({:.1}x smaller); {what}",
                made.scheme,
                100.0 * made.val_accuracy.1,
                100.0 * q.val_accuracy,
                -q.drop_points,
                max_drop,
                q.dense_bytes,
                q.bytes,
                q.dense_bytes as f64 / q.bytes.max(1) as f64
            ),
            serde_json::to_value(q).unwrap_or_default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_is_kept_within_max_drop_points() {
        let v = int8_verdict(0.95, 0.945, 1.0);
        assert!(v.kept && (v.drop_points - 0.5).abs() < 1e-4, "{v:?}");
        assert!(!int8_verdict(0.95, 0.93, 1.0).kept);
        assert!(int8_verdict(0.95, 0.96, 0.0).kept, "a gain is kept at any limit");
    }
}
