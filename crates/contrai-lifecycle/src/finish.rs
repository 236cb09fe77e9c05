//! The end of the run, after the last phase: the final model exported and evaluated, the student
//! distilled and the quantized variants made (when refine runs and the recipe asks), each kept
//! only when it costs at most `refine.max_drop` on validation ([`quant_verdict`]), and the holdout
//! read **once**, last.

use contrai_recipe::{Phase, Quantize};
use contrai_run::{Decision, DecisionKind, Measure, QuantEval};
use serde_json::json;

use crate::awaiting::{Await as Awaiting, FinishStep as Await, QuantMade, Scores};
use crate::conductor::{Conductor, Task};
use crate::error::{ConductorError, Result};
use crate::protocol::{Action, Observation, QuantHoldout, QuantVerdict, Request, Summary, Turn};

/// The rule for a quantized variant: kept when it costs at most `refine.max_drop` — validation
/// accuracy points for a classifier; for a language model the rise of its validation perplexity
/// in percent (its token accuracy moves little while the text it writes changes). A cost that
/// cannot be measured (a non-finite loss) refuses it.
pub fn quant_verdict(variant: Quantize, task: Task, dense: Scores, q: Scores, max_drop: f64) -> QuantVerdict {
    let (drop_points, measure) = match task {
        Task::Classification => (100.0 * f64::from(dense.accuracy - q.accuracy), Measure::Accuracy),
        Task::LanguageModel => (
            100.0 * f64::from(q.loss - dense.loss).exp_m1(),
            Measure::Perplexity,
        ),
    };
    QuantVerdict {
        variant,
        kept: drop_points <= max_drop,
        drop_points,
        measure,
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
        match (step, obs) {
            (
                Await::Exported,
                Observation::Exported {
                    val_loss,
                    val_accuracy,
                },
            ) => {
                let dense = Scores {
                    loss: val_loss,
                    accuracy: val_accuracy,
                };
                if refine && self.recipe.refine.distill.enabled {
                    let next = Awaiting::Finish(Await::Distilled { dense });
                    return Ok(self.ask(Vec::new(), Request::Distil, next));
                }
                Ok(self.quantize(Vec::new(), dense, Vec::new(), None))
            }
            (Await::Distilled { dense }, obs @ Observation::Distilled { .. }) => {
                let d = self.distill_decision(&obs);
                Ok(self.quantize(vec![Action::Record(d)], dense, Vec::new(), None))
            }
            (Await::Distilled { dense }, Observation::Declined { what, instead }) => {
                let d = self.declined(&what, &instead);
                Ok(self.quantize(vec![Action::Record(d)], dense, Vec::new(), None))
            }
            (Await::Quantized { dense, variant, made }, Observation::Declined { what, instead }) => {
                let d = self.declined(&what, &instead);
                Ok(self.quantize(vec![Action::Record(d)], dense, made, Some(variant)))
            }
            (
                Await::Quantized {
                    dense,
                    variant,
                    mut made,
                },
                Observation::Quantized {
                    val_loss,
                    val_accuracy,
                    bytes,
                    dense_bytes,
                    scheme,
                    file,
                },
            ) => {
                let q = Scores {
                    loss: val_loss,
                    accuracy: val_accuracy,
                };
                made.push(QuantMade {
                    verdict: quant_verdict(variant, self.info.task, dense, q, self.recipe.refine.max_drop),
                    val: (q, dense),
                    bytes: (bytes, dense_bytes),
                    scheme,
                    file,
                });
                Ok(self.quantize(Vec::new(), dense, made, Some(variant)))
            }
            (
                Await::Holdout { made },
                Observation::HoldoutRead {
                    loss,
                    accuracy,
                    samples,
                    quantized,
                },
            ) => Ok(self.finished(&made, &quantized, (loss, accuracy, samples))),
            (step, obs) => Err(ConductorError::Protocol(format!(
                "{obs:?} does not answer the end's {step:?}"
            ))),
        }
    }

    /// The quantized variant `refine.quantize` lists after `done` (when refine runs); after the
    /// last, the holdout.
    fn quantize(
        &mut self,
        out: Vec<Action>,
        dense: Scores,
        made: Vec<QuantMade>,
        done: Option<Quantize>,
    ) -> Turn {
        let r = &self.recipe.refine;
        let asked = r
            .quantize
            .after(done)
            .filter(|_| self.recipe.run.has_phase(Phase::Refine));
        if let Some(variant) = asked {
            let block = Some(r.quantize_block).filter(|b| *b > 0);
            let next = Awaiting::Finish(Await::Quantized { dense, variant, made });
            return self.ask(out, Request::Quantize { to: variant, block }, next);
        }
        let quantized = made.iter().map(|m| m.verdict).collect();
        self.ask(
            out,
            Request::ReadHoldout { quantized },
            Awaiting::Finish(Await::Holdout { made }),
        )
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
        made: &[QuantMade],
        quantized: &[QuantHoldout],
        holdout: (f32, f32, usize),
    ) -> Turn {
        let (loss, accuracy, samples) = holdout;
        let phase = self.recipe.run.phases.last().copied().unwrap_or(Phase::Main);
        let step = self.state.step;
        let mut out = Vec::new();
        let (mut int8, mut int4) = (None, None);
        for m in made {
            let eval = m.eval(quantized.iter().find(|h| h.variant == m.verdict.variant));
            out.push(Action::Record(self.quant_decision(step, phase, m, &eval)));
            match m.verdict.variant {
                Quantize::Int8 => int8 = Some(eval),
                Quantize::Int4 => int4 = Some(eval),
            }
        }
        let perplexity = match self.info.task {
            Task::LanguageModel => format!(", perplexity {:.2}", f64::from(loss).exp()),
            Task::Classification => String::new(),
        };
        out.push(Action::Record(Decision::new(
            step,
            phase,
            DecisionKind::Holdout,
            format!(
                "the holdout, read once: accuracy {:.2} %, loss {loss:.4}{perplexity} on {samples} samples",
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
            int4,
        };
        self.ask(out, Request::Finish(Box::new(summary)), Awaiting::Over)
    }

    /// A quantized variant's verdict, recorded with what it cost and saved.
    fn quant_decision(&self, step: u64, phase: Phase, made: &QuantMade, q: &QuantEval) -> Decision {
        let max_drop = self.recipe.refine.max_drop;
        let variant = made.verdict.variant;
        let kind = match (variant, q.kept) {
            (Quantize::Int8, true) => DecisionKind::Int8,
            (Quantize::Int4, true) => DecisionKind::Int4,
            (Quantize::Int8, false) => DecisionKind::RefuseInt8,
            (Quantize::Int4, false) => DecisionKind::RefuseInt4,
        };
        let what = if q.kept {
            format!("kept as {}", made.file)
        } else {
            "refused: the model stays f32".to_string()
        };
        let cost = match q.val_perplexity {
            Some((quantized, dense)) => format!(
                "validation perplexity {dense:.2} → {quantized:.2} ({:+.2} %, limit +{max_drop} %)",
                q.drop_points
            ),
            None => format!(
                "validation accuracy {:.2} % → {:.2} % ({:+.2} points, limit −{max_drop} points)",
                100.0 * made.val.1.accuracy,
                100.0 * q.val_accuracy,
                -q.drop_points,
            ),
        };
        Decision::new(
            step,
            phase,
            kind,
            format!(
                "{variant} ({}): {cost}, {} → {} bytes ({:.1}x smaller); {what}",
                made.scheme,
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

    fn scores(loss: f32, accuracy: f32) -> Scores {
        Scores { loss, accuracy }
    }

    #[test]
    fn a_classifier_s_variant_is_kept_within_max_drop_accuracy_points() {
        let c = Task::Classification;
        let v = quant_verdict(Quantize::Int8, c, scores(0.3, 0.95), scores(0.3, 0.945), 1.0);
        assert!(v.kept && (v.drop_points - 0.5).abs() < 1e-4, "{v:?}");
        assert_eq!(v.measure, Measure::Accuracy);
        assert!(!quant_verdict(Quantize::Int8, c, scores(0.3, 0.95), scores(0.3, 0.93), 1.0).kept);
        let gain = quant_verdict(Quantize::Int4, c, scores(0.3, 0.95), scores(0.9, 0.96), 0.0);
        assert!(gain.kept, "a gain is kept at any limit, whatever the loss");
    }

    #[test]
    fn a_language_model_s_variant_is_judged_by_its_perplexity_rise_in_percent() {
        let lm = Task::LanguageModel;
        // ln(1.015) ≈ 0.014889: perplexity 1.5 % higher; the token accuracy is not looked at.
        let v = quant_verdict(
            Quantize::Int4,
            lm,
            scores(3.0, 0.40),
            scores(3.014_889, 0.40),
            2.0,
        );
        assert!(v.kept && (v.drop_points - 1.5).abs() < 1e-3, "{v:?}");
        assert_eq!(v.measure, Measure::Perplexity);
        let worse = quant_verdict(Quantize::Int4, lm, scores(3.0, 0.40), scores(3.2, 0.41), 2.0);
        assert!(
            !worse.kept && (worse.drop_points - 22.14).abs() < 0.01,
            "{worse:?}"
        );
        let nan = quant_verdict(Quantize::Int8, lm, scores(3.0, 0.4), scores(f32::NAN, 0.4), 100.0);
        assert!(!nan.kept, "an unmeasured cost refuses the variant");
    }
}
