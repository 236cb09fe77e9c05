//! The end of a run, as the conductor asks for it: the final model exported and evaluated, the
//! student distilled, the int8 model made, the holdout read once and every model measured on
//! it, the model card, and `final/eval.json` last (its presence marks a finished run).

use burn::module::Module;
use contrai_lifecycle::{Observation, QuantHoldout, QuantVerdict, Summary};
use contrai_recipe::Quantize;
use contrai_run::{FINAL_CARD, FINAL_INT8, FINAL_MODEL, FINAL_STUDENT, FinalEval, FinalModel, ModelCard};

use crate::batch::{Encoded, Encoder};
use crate::compact::compact;
use crate::distill::{FitData, student_note, student_size};
use crate::engine::Engine;
use crate::error::{Result, record_err};
use crate::evaluate::evaluate;
use crate::export::{LATENCY_BATCH, Measured, save_safetensors, time_variants, variant};
use crate::options::Outcome;
use crate::prune::Structure;
use crate::quantize::{quantize_int8, record_bytes, scheme_text};

impl Engine<'_> {
    /// Writes the final weights (masks applied), the encoder and the classes, and evaluates them.
    pub(crate) fn export(&mut self) -> Result<Observation> {
        let fin = self.run.final_dir();
        std::fs::create_dir_all(&fin).map_err(|e| crate::TrainError::io(&fin, e))?;
        self.merge_lora(); // a run that ends in main: its adapters are merged here
        let valid = self.net.model.valid();
        let x = &self.data.extras;
        // Whole heads and units pruned leave the exported matrices (same outputs, fewer weights).
        let (valid, removed) = compact(valid, self.structure());
        if let Some(note) = removed.note() {
            self.journal.say(&format!("exported model: {note}"));
        }
        save_safetensors(&valid, &fin.join(FINAL_MODEL))?;
        x.encoder.save(&fin.join(Encoder::file_name(&self.recipe)))?;
        contrai_run::write_json(&fin.join(contrai_run::CLASSES), &x.classes)?;
        if let crate::model::Classifier::Bert(m) = &valid {
            let names = &x.classes.names;
            crate::pretrained::export_hf(&self.recipe.model, m, names, &fin.join(contrai_run::FINAL_HF))?;
        }
        let (val_loss, val_accuracy) = evaluate(&valid, &self.data.val, self.eval_batch(), &self.plain);
        self.finale.val = (val_loss, val_accuracy);
        self.finale.exported = Some((valid, removed));
        Ok(Observation::Exported {
            val_loss,
            val_accuracy,
        })
    }

    /// Distils the final model into the recipe's student on the training rows in use; writes
    /// `final/student.safetensors` and its log `final/student-metrics.jsonl`.
    pub(crate) fn distil(&mut self) -> Result<Observation> {
        let d = self.recipe.refine.distill.clone();
        let teacher = self.net.model.valid();
        self.journal.say(&format!(
            "distilling into a student ({}) for {} steps: loss = {} · CE + {} · T² · KL, T = {}",
            student_size(&d, self.recipe.model.kind),
            d.steps,
            d.w_ce,
            d.w_kd,
            d.temperature
        ));
        let data = FitData {
            train: &self.data.train,
            rows: self.rows(),
            val: &self.data.val,
            eval_batch: self.eval_batch(),
        };
        let mut on_step = crate::distill::log_evaluations(self.journal.log());
        let fitted = crate::distill::distill(
            &teacher,
            &self.recipe.model,
            &d,
            &data,
            crate::step::optimizer(&self.recipe),
            (self.recipe.run.seed, self.recipe.main.clip_norm),
            &mut on_step,
        )?;
        let fin = self.run.final_dir();
        let mut lines = Vec::new();
        for r in &fitted.rows {
            lines.extend(serde_json::to_vec(r).map_err(|e| record_err(&fin, e))?);
            lines.push(b'\n');
        }
        contrai_base::write_atomic(fin.join(contrai_run::FINAL_STUDENT_METRICS), &lines)?;
        save_safetensors(&fitted.model, &fin.join(FINAL_STUDENT))?;
        let (best_step, val_loss, val_accuracy) = fitted.best;
        let obs = Observation::Distilled {
            parameters: fitted.model.num_params(),
            teacher_parameters: teacher.num_params(),
            best_step,
            val_loss,
            val_accuracy,
        };
        self.finale.student = Some(fitted);
        Ok(obs)
    }

    /// Quantizes the final model to int8 and evaluates it on validation (int4 is declined:
    /// Burn's quantization here is int8).
    pub(crate) fn quantize(&mut self, to: Quantize, block: Option<u8>) -> Result<Observation> {
        if to != Quantize::Int8 {
            return Ok(Observation::Declined {
                what: format!("quantize the final model to {to}"),
                instead: "the Burn engine quantizes to int8 only: no int4 variant".into(),
            });
        }
        let valid = self.net.model.valid();
        let q = quantize_int8(valid.clone(), block);
        let bytes = record_bytes(&q)?;
        let (val_loss, val_accuracy) = evaluate(&q, &self.data.val, self.eval_batch(), &self.plain);
        let obs = Observation::Quantized {
            val_loss,
            val_accuracy,
            bytes: bytes.len() as u64,
            dense_bytes: record_bytes(&valid)?.len() as u64,
            scheme: scheme_text(block),
            file: format!("final/{FINAL_INT8}"),
        };
        self.finale.int8 = Some((q, bytes, val_accuracy));
        Ok(obs)
    }

    /// Reads the holdout — once — and measures every model on it side by side; keeps the int8
    /// model when its verdict says so; writes the model card.
    pub(crate) fn read_holdout(&mut self, verdicts: &[QuantVerdict]) -> Result<Observation> {
        let verdict = verdicts.iter().find(|v| v.variant == Quantize::Int8);
        let samples = self.data.holdout.read_once()?;
        let reads = self.data.holdout.reads();
        if reads > 1 {
            self.journal.warn(&format!(
                "the holdout was read {reads} times: an earlier session of this run read it and did not finish; the same final model is evaluated again (nothing was chosen on the earlier read)"
            ));
        }
        let x = &self.data.extras;
        let hold = Encoded::new(&samples, &x.encoder, &x.classes, "holdout")?;
        let fin = self.run.final_dir();
        let size = |f: &str| std::fs::metadata(fin.join(f)).map_or(0, |m| m.len());
        let eb = self.eval_batch();
        // The model as exported: what the card measures is what `final/` holds.
        let (valid, removed) = self.finale.exported.take().ok_or_else(|| {
            contrai_lifecycle::ConductorError::Protocol(
                "the holdout is read before the final model is exported".into(),
            )
        })?;
        let (holdout_loss, holdout_accuracy) = evaluate(&valid, &hold, eb, &self.plain);
        self.finale.holdout = (holdout_loss, holdout_accuracy, hold.len());
        let dense = Measured {
            val_accuracy: self.finale.val.1,
            holdout: (holdout_loss, holdout_accuracy),
            bytes: size(FINAL_MODEL),
        };
        let note = match removed.note() {
            Some(r) => format!("the refined model, masks applied; {r}"),
            None => "the refined model, masks applied".to_string(),
        };
        let mut variants = vec![variant(
            FinalModel::F32.as_ref(),
            Some(format!("final/{FINAL_MODEL}")),
            &valid,
            dense,
            note,
        )];
        let mut models = vec![&valid];
        let mut quantized = Vec::new();
        if let (Some((q, bytes, q_val)), Some(v)) = (&self.finale.int8, verdict) {
            let holdout = evaluate(q, &hold, eb, &self.plain);
            quantized.push(QuantHoldout {
                variant: Quantize::Int8,
                loss: holdout.0,
                accuracy: holdout.1,
            });
            let m = Measured {
                val_accuracy: *q_val,
                holdout,
                bytes: bytes.len() as u64,
            };
            let block = Some(self.recipe.refine.quantize_block).filter(|b| *b > 0);
            let (file, note) = if v.kept {
                contrai_base::write_atomic(fin.join(FINAL_INT8), bytes)?;
                (Some(format!("final/{FINAL_INT8}")), scheme_text(block))
            } else {
                let limit = self.recipe.refine.max_drop;
                (
                    None,
                    format!(
                        "refused: {:.2} validation points lost (limit {limit})",
                        v.drop_points
                    ),
                )
            };
            variants.push(variant(FinalModel::Int8.as_ref(), file, q, m, note));
            models.push(q);
        }
        if let Some(fitted) = &self.finale.student {
            let m = Measured::of(&fitted.model, &self.data.val, &hold, eb, size(FINAL_STUDENT));
            let note = student_note(&self.recipe.refine.distill, self.recipe.model.kind, fitted);
            variants.push(variant(
                FinalModel::Student.as_ref(),
                Some(format!("final/{FINAL_STUDENT}")),
                &fitted.model,
                m,
                note,
            ));
            models.push(&fitted.model);
        }
        time_variants(&mut variants, &models, &self.data.val);
        self.finale.student_variant = variants
            .iter()
            .find(|v| v.name == FinalModel::Student.as_ref())
            .cloned();
        let card = ModelCard {
            model: Some(self.recipe.model.clone()),
            architecture: None,
            classes: x.classes.names.clone(),
            parameters: valid.num_params(),
            sparsity: self.net.masks.by_module(),
            gradient_checkpointing: self.recipe.model.gradient_checkpointing,
            latency_batch: LATENCY_BATCH,
            variants,
        };
        contrai_run::write_json(&fin.join(FINAL_CARD), &card)?;
        Ok(Observation::HoldoutRead {
            loss: holdout_loss,
            accuracy: holdout_accuracy,
            samples: hold.len(),
            quantized,
        })
    }

    /// What the run pruned whole, and so what export removes from the matrices.
    fn structure(&self) -> Structure {
        let c = &self.recipe.contract;
        Structure::new(c.prune_heads.then_some(self.recipe.model.heads), c.prune_units)
    }

    /// The run is over: `final/eval.json`, written last.
    pub(crate) fn finish(self, summary: Summary) -> Result<Outcome> {
        self.journal.finish_bar();
        self.journal.sync()?;
        let f = &self.finale;
        let (holdout_loss, holdout_accuracy, holdout_samples) = f.holdout;
        let eval = FinalEval {
            step: summary.step,
            classes: self.data.extras.classes.names.clone(),
            holdout_samples,
            holdout_loss,
            holdout_accuracy,
            val_loss: f.val.0,
            val_accuracy: f.val.1,
            best: summary.best,
            holdout_reads: self.data.holdout.reads(),
            main_end: summary.main_end,
            planned_steps: summary.planned_steps,
            sparsity: self.net.masks.by_module(),
            int8: summary.int8,
            int4: summary.int4,
            student: f.student_variant.clone(),
        };
        contrai_run::write_json(&self.run.eval(), &eval)?;
        Ok(self.outcome(Some(eval)))
    }
}
