//! `contrai predict`: a finished run's model — the refined f32 model, its int8 model or its
//! student — applied to new samples with the run's own tokenizer or feature scaler, one JSON row
//! of id, predicted label and class probabilities a sample.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Device;
use burn::tensor::activation::softmax;
use contrai_data::{FieldSpec, Progress, Source};
use contrai_run::{FinalModel, RunDir};
use serde::{Deserialize, Serialize};

use crate::batch::{Classes, Encoded, Encoder};
use crate::data::Samples;
use crate::distill::student_spec;
use crate::error::{Result, TrainError};
use crate::evaluate::{eval_batch, eval_batches};
use crate::export::load_safetensors;
use crate::model::Classifier;
use crate::quantize::load_record;

/// Samples read, encoded and run at a time (bounds memory on large files).
const CHUNK: usize = 1024;

/// One output row.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Prediction {
    /// The sample's id (its id field, or its line number).
    pub id: String,
    /// The predicted class.
    pub label: String,
    /// Each class's probability (softmax of the logits).
    pub probabilities: BTreeMap<String, f32>,
    /// The label the file gave, when it has one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub given: Option<String>,
}

/// What a prediction run did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PredictSummary {
    /// The model file, relative to the run directory.
    pub model: String,
    /// Samples predicted.
    pub samples: usize,
    /// Of them, those whose file gave a label.
    pub labelled: usize,
    /// Share of the labelled samples predicted right (`None` when none is labelled).
    pub accuracy: Option<f64>,
    /// Labels in the file that are none of the model's classes (counted as wrong).
    pub unknown_labels: usize,
    /// Wall-clock seconds, reading and writing included.
    pub seconds: f64,
    /// Samples a second.
    pub samples_per_second: f64,
}

/// A finished run's model, ready to predict.
pub struct Predictor {
    model: Classifier,
    encoder: Encoder,
    classes: Classes,
    fields: FieldSpec,
    batch: usize,
    file: String,
}

impl Predictor {
    /// Loads `which` of `run`'s final models with the run's encoder and classes.
    pub fn open(run: &Path, which: FinalModel) -> Result<Predictor> {
        crate::process::setup();
        let mut recipe = crate::setup::run_recipe(run)?;
        let dir = RunDir::new(run);
        if !dir.is_finished() {
            return Err(corrupt(
                run,
                "has no finished model (final/eval.json is missing): `contrai train --resume` finishes the run; `contrai compress` makes models from its checkpoints",
            ));
        }
        let fin = dir.final_dir();
        if recipe.model.kind == contrai_recipe::ModelKind::Bert {
            // The run's own Hugging Face export stands in for the checkpoint it started from,
            // which may have moved since.
            let hf = fin.join(contrai_run::FINAL_HF);
            recipe.model.pretrained = Some(hf.display().to_string());
        }
        let encoder = Encoder::load(&recipe, &fin)?;
        let classes: Classes = contrai_run::read_json(&fin.join(contrai_run::CLASSES))?;
        let path = fin.join(which.file());
        if !path.is_file() {
            return Err(corrupt(&path, absent(which)));
        }
        let spec = match which {
            FinalModel::Student => student_spec(&recipe.model, &recipe.refine.distill)?,
            FinalModel::F32 | FinalModel::Int8 => recipe.model.clone(),
        };
        let fresh = Classifier::new(
            &spec,
            classes.names.len(),
            encoder.width(),
            recipe.run.seed,
            &Device::flex(),
        )?;
        let model = match which {
            FinalModel::Int8 => {
                let bytes = std::fs::read(&path).map_err(|e| TrainError::io(&path, e))?;
                load_record(fresh, bytes, &path)?
            }
            FinalModel::F32 | FinalModel::Student => {
                load_safetensors(crate::compact::shaped_as_file(fresh, &path)?, &path)?
            }
        };
        let d = &recipe.data;
        Ok(Predictor {
            model,
            encoder,
            classes,
            fields: FieldSpec {
                text: d.text.clone(),
                label: Some(d.label.clone()),
                id: Some(d.id.clone()),
                explicit: false,
            },
            batch: eval_batch(&recipe),
            file: format!("final/{}", which.file()),
        })
    }

    /// The fields read from an input file: the run's own `[data]` names unless changed here.
    pub fn fields_mut(&mut self) -> &mut FieldSpec {
        &mut self.fields
    }

    /// The class names, in index order.
    pub fn classes(&self) -> &[String] {
        &self.classes.names
    }

    /// Predicts every sample of `source`, writing one JSON line each to `out`, in file order.
    pub fn predict(
        &self,
        source: &Source,
        out: &mut dyn Write,
        progress: &dyn Progress,
    ) -> Result<PredictSummary> {
        crate::process::setup();
        let t = Instant::now();
        let name = source.name();
        progress.stage(&format!("predicting {name}"), source.progress_total());
        let mut tally = Tally::default();
        let mut chunk = Chunk::default();
        for rec in source.records(&self.fields)? {
            let rec = rec?;
            let text = rec.text.ok_or_else(|| {
                TrainError::BadData(format!(
                    "{name}:{}: sample `{}` has no `{}` field (the text the model reads)",
                    rec.line, rec.id, self.fields.text
                ))
            })?;
            chunk.samples.ids.push(rec.id);
            chunk.samples.texts.push(text);
            chunk.given.push(rec.label);
            progress.inc(rec.progress);
            if chunk.samples.len() == CHUNK {
                self.run_chunk(std::mem::take(&mut chunk), &name, out, &mut tally)?;
            }
        }
        self.run_chunk(chunk, &name, out, &mut tally)?;
        out.flush().map_err(|e| TrainError::io(Path::new(&name), e))?;
        progress.finish();
        let seconds = t.elapsed().as_secs_f64();
        Ok(PredictSummary {
            model: self.file.clone(),
            samples: tally.samples,
            labelled: tally.labelled,
            accuracy: (tally.labelled > 0).then(|| tally.correct as f64 / tally.labelled as f64),
            unknown_labels: tally.unknown,
            seconds,
            samples_per_second: tally.samples as f64 / seconds.max(1e-9),
        })
    }

    /// Encodes and predicts one chunk, writes its rows, counts what it got right.
    fn run_chunk(&self, chunk: Chunk, name: &str, out: &mut dyn Write, tally: &mut Tally) -> Result<()> {
        if chunk.samples.is_empty() {
            return Ok(());
        }
        let encoded = Encoded::unlabelled(&chunk.samples, &self.encoder, name)?;
        let device = Device::flex();
        let mut probs: Vec<f32> = Vec::with_capacity(encoded.len() * self.classes.names.len());
        for b in eval_batches(&encoded, self.batch, &device) {
            let p = softmax(self.model.forward(&b, None), 1).into_data();
            probs.extend(
                p.try_to_vec::<f32>()
                    .map_err(|e| TrainError::Unsupported(format!("reading probabilities: {e:?}")))?,
            );
        }
        let k = self.classes.names.len();
        for ((id, given), p) in chunk
            .samples
            .ids
            .into_iter()
            .zip(chunk.given)
            .zip(probs.chunks(k))
        {
            let best = (0..k).fold(0, |b, i| if p[i] > p[b] { i } else { b });
            let label = self.classes.names[best].clone();
            tally.count(&label, given.as_deref(), &self.classes);
            let row = Prediction {
                id,
                label,
                probabilities: self
                    .classes
                    .names
                    .iter()
                    .cloned()
                    .zip(p.iter().copied())
                    .collect(),
                given,
            };
            serde_json::to_writer(&mut *out, &row).map_err(|e| TrainError::io(Path::new(name), e.into()))?;
            out.write_all(b"\n")
                .map_err(|e| TrainError::io(Path::new(name), e))?;
        }
        Ok(())
    }
}

/// Samples read and not yet predicted.
#[derive(Default)]
struct Chunk {
    samples: Samples,
    given: Vec<Option<String>>,
}

/// Running counts of a prediction run.
#[derive(Default)]
struct Tally {
    samples: usize,
    labelled: usize,
    correct: usize,
    unknown: usize,
}

impl Tally {
    fn count(&mut self, predicted: &str, given: Option<&str>, classes: &Classes) {
        self.samples += 1;
        if let Some(g) = given {
            self.labelled += 1;
            self.correct += usize::from(g == predicted);
            self.unknown += usize::from(classes.index(g).is_none());
        }
    }
}

/// Why a final model's file is not there.
fn absent(which: FinalModel) -> &'static str {
    match which {
        FinalModel::F32 => "is missing: the run's final directory is incomplete",
        FinalModel::Int8 => {
            "does not exist: refine made no int8 model or refused it (the model card's int8 note says which); `contrai compress RUN --int8` makes one"
        }
        FinalModel::Student => {
            "does not exist: the recipe distilled no student ([refine.distill] enabled = false, or refine did not run); `contrai compress RUN --distill` makes one"
        }
    }
}

fn corrupt(path: &Path, message: &str) -> TrainError {
    TrainError::Corrupt {
        path: PathBuf::from(path),
        message: message.into(),
    }
}
