//! Encoded partitions (the fitted encoder, model inputs, batches) and the seeded batch order, resumable from a two-number cursor.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use std::path::Path;

use burn::tensor::Device;
use contrai_recipe::{ModelKind, Recipe};

use crate::data::Samples;
use crate::dropout::mix;
use crate::error::{Result, TrainError};
use crate::features::{self, Scaler};
use crate::model::{Batch, TextBatch};
use crate::tokenizer::Tokenizer;

/// How a partition's raw inputs become model inputs: fitted on train only, saved with the run.
#[derive(Debug, Clone)]
pub enum Encoder {
    /// Word ids, `seq` a sample (`tokenizer.json`).
    Text {
        /// The tokenizer.
        tokenizer: Tokenizer,
        /// Tokens a sample.
        seq: usize,
    },
    /// A pretrained checkpoint's own tokenizer (its `tokenizer.json`, copied into the run).
    Pretrained {
        /// The tokenizer, giving `seq` tokens a text.
        tokenizer: Box<contrai_bert::BertTokenizer>,
    },
    /// Standardised numeric features (`features.json`).
    Features {
        /// Means and deviations of train.
        scaler: Scaler,
        /// The field that holds them (for messages).
        field: String,
    },
}

impl Encoder {
    /// The file the encoder of `recipe`'s model is saved in.
    pub fn file_name(recipe: &Recipe) -> &'static str {
        if recipe.model.kind == ModelKind::Mlp {
            "features.json"
        } else {
            "tokenizer.json"
        }
    }

    /// Fits the encoder of `recipe`'s model on the train partition.
    pub fn fit(recipe: &Recipe, train: &Samples) -> Result<Encoder> {
        if recipe.model.kind == ModelKind::Bert {
            let dir = crate::pretrained::open(&recipe.model)?;
            return Self::pretrained(&dir.dir.join(contrai_bert::load::TOKENIZER), recipe.model.seq_len);
        }
        if recipe.model.kind == ModelKind::Mlp {
            let rows = features::rows(train, None, "train", &recipe.data.text)?;
            let scaler = Scaler::fit(&rows)?;
            return Ok(Encoder::Features {
                scaler,
                field: recipe.data.text.clone(),
            });
        }
        let tokenizer = Tokenizer::fit(train.texts.iter().map(String::as_str), recipe.model.vocab)?;
        Ok(Encoder::Text {
            tokenizer,
            seq: recipe.model.seq_len,
        })
    }

    /// Reads the encoder a run saved in `dir`.
    pub fn load(recipe: &Recipe, dir: &Path) -> Result<Encoder> {
        let path = dir.join(Self::file_name(recipe));
        if recipe.model.kind == ModelKind::Bert {
            return Self::pretrained(&path, recipe.model.seq_len);
        }
        if recipe.model.kind == ModelKind::Mlp {
            let scaler = Scaler::load(&path)?;
            return Ok(Encoder::Features {
                scaler,
                field: recipe.data.text.clone(),
            });
        }
        let tokenizer = Tokenizer::load(&path)?;
        Ok(Encoder::Text {
            tokenizer,
            seq: recipe.model.seq_len,
        })
    }

    /// A checkpoint's `tokenizer.json` giving `seq` tokens a text; its padding id must be 0 (the
    /// batches mask id 0), as in BERT's vocabularies.
    fn pretrained(file: &Path, seq: usize) -> Result<Encoder> {
        let tokenizer = contrai_bert::BertTokenizer::read(file, seq)?;
        let pad = tokenizer.pad_id();
        if pad != 0 {
            return Err(TrainError::Unsupported(format!(
                "{}: the padding token's id is {pad}; Contrai's batches need it to be 0 (BERT's [PAD])",
                file.display()
            )));
        }
        Ok(Encoder::Pretrained {
            tokenizer: Box::new(tokenizer),
        })
    }

    /// Writes the encoder as `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        match self {
            Encoder::Text { tokenizer, .. } => tokenizer.save(path),
            Encoder::Pretrained { tokenizer } => {
                let file = tokenizer.path();
                let bytes = std::fs::read(file).map_err(|e| TrainError::io(file, e))?;
                Ok(contrai_base::write_atomic(path, &bytes)?)
            }
            Encoder::Features { scaler, .. } => scaler.save(path),
        }
    }

    /// The model's input width: tokens a sample, or features a sample.
    pub fn width(&self) -> usize {
        match self {
            Encoder::Text { seq, .. } => *seq,
            Encoder::Pretrained { tokenizer, .. } => tokenizer.len(),
            Encoder::Features { scaler, .. } => scaler.dim,
        }
    }

    /// One line for the run's log.
    pub fn describe(&self) -> String {
        match self {
            Encoder::Text { tokenizer, .. } => format!(
                "tokenizer: {} ids ({} words) fitted on train",
                tokenizer.size,
                tokenizer.words.len()
            ),
            Encoder::Pretrained { tokenizer } => format!(
                "tokenizer: the checkpoint's {} ({} ids)",
                tokenizer.path().display(),
                tokenizer.vocab_size()
            ),
            Encoder::Features { scaler, field } => {
                format!(
                    "features: {} numbers a sample in `{field}`, standardised on train",
                    scaler.dim
                )
            }
        }
    }
}

/// A partition's model inputs, row-major.
#[derive(Debug, Clone)]
pub enum Inputs {
    /// Padded token ids (`PAD` = 0).
    Tokens(Vec<i32>),
    /// Standardised features.
    Features(Vec<f32>),
}

/// A partition as model inputs (`width` a sample) and class indices.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The inputs, `len() * width`.
    pub inputs: Inputs,
    /// Class index of each sample.
    pub labels: Vec<i32>,
    /// Tokens or features a sample.
    pub width: usize,
}

impl Encoded {
    /// Encodes `samples` (the `part` partition) with `enc`, labels mapped through `classes`.
    pub fn new(samples: &Samples, enc: &Encoder, classes: &Classes, part: &str) -> Result<Encoded> {
        let labels = samples
            .labels
            .iter()
            .map(|l| {
                classes.index(l).map(|i| i as i32).ok_or_else(|| {
                    TrainError::BadData(format!(
                        "label `{l}` in the {part} partition never occurs in train (train has: {})",
                        classes.names.join(", ")
                    ))
                })
            })
            .collect::<Result<Vec<i32>>>()?;
        Ok(Encoded {
            inputs: Self::inputs(samples, enc, part)?,
            labels,
            width: enc.width(),
        })
    }

    /// Encodes `samples` for prediction: their labels, if any, are not read (class 0 stands in).
    pub fn unlabelled(samples: &Samples, enc: &Encoder, part: &str) -> Result<Encoded> {
        Ok(Encoded {
            inputs: Self::inputs(samples, enc, part)?,
            labels: vec![0; samples.len()],
            width: enc.width(),
        })
    }

    /// The model inputs of `samples`.
    fn inputs(samples: &Samples, enc: &Encoder, part: &str) -> Result<Inputs> {
        Ok(match enc {
            Encoder::Text { tokenizer, seq } => {
                let mut ids = vec![0i32; samples.len() * seq];
                for (row, text) in ids.chunks_mut(*seq).zip(&samples.texts) {
                    for (slot, id) in row.iter_mut().zip(tokenizer.encode(text, *seq)) {
                        *slot = id as i32;
                    }
                }
                Inputs::Tokens(ids)
            }
            Encoder::Pretrained { tokenizer, .. } => {
                let texts: Vec<&str> = samples.texts.iter().map(String::as_str).collect();
                Inputs::Tokens(tokenizer.encode(&texts)?.ids)
            }
            Encoder::Features { scaler, field } => {
                let rows = features::rows(samples, Some(scaler.dim), part, field)?;
                Inputs::Features(scaler.encode(&rows))
            }
        })
    }

    /// Samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The samples `rows`, in that order.
    pub fn subset(&self, rows: &[usize]) -> Encoded {
        fn pick<T: Copy>(v: &[T], rows: &[usize], w: usize) -> Vec<T> {
            rows.iter()
                .flat_map(|&r| v[r * w..(r + 1) * w].iter().copied())
                .collect()
        }
        let inputs = match &self.inputs {
            Inputs::Tokens(ids) => Inputs::Tokens(pick(ids, rows, self.width)),
            Inputs::Features(x) => Inputs::Features(pick(x, rows, self.width)),
        };
        Encoded {
            inputs,
            labels: rows.iter().map(|&r| self.labels[r]).collect(),
            width: self.width,
        }
    }

    /// Mean tokens a sample (padding aside) of `rows`: a text batch's length, which a loss jump
    /// may follow (`None`: numeric features, or no rows).
    pub fn mean_length(&self, rows: &[usize]) -> Option<f32> {
        let Inputs::Tokens(ids) = &self.inputs else {
            return None;
        };
        let w = self.width;
        let tokens: usize = rows
            .iter()
            .filter_map(|&r| ids.get(r * w..(r + 1) * w))
            .map(|row| row.iter().filter(|id| **id != 0).count())
            .sum();
        (!rows.is_empty()).then(|| tokens as f32 / rows.len() as f32)
    }

    /// The samples `rows` as one batch on `device`.
    pub fn batch(&self, rows: &[usize], device: &Device) -> Batch {
        let part = self.subset(rows);
        match &part.inputs {
            Inputs::Tokens(ids) => Batch::Text(TextBatch::new(ids, &part.labels, self.width, device)),
            Inputs::Features(x) => Batch::features(x, &part.labels, self.width, device),
        }
    }
}

/// The class names, sorted; a class's index is its position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classes {
    /// Names in index order.
    pub names: Vec<String>,
}

impl Classes {
    /// The classes found in the train labels.
    pub fn from_labels(labels: &[String]) -> Classes {
        let set: BTreeMap<&str, ()> = labels.iter().map(|l| (l.as_str(), ())).collect();
        Classes {
            names: set.keys().map(|s| s.to_string()).collect(),
        }
    }

    /// The index of `label`.
    pub fn index(&self, label: &str) -> Option<usize> {
        self.names.binary_search_by(|n| n.as_str().cmp(label)).ok()
    }
}

/// Where the batch order stands: epoch and position within its permutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Cursor {
    /// Epoch (each a fresh seeded permutation).
    pub epoch: u64,
    /// Next position within the epoch's permutation.
    pub pos: usize,
}

/// Draws full micro-batches in a seeded order; a remainder too small for a batch is skipped.
#[derive(Debug, Clone)]
pub struct Batcher {
    n: usize,
    batch: usize,
    seed: u64,
    perm: Vec<usize>,
    /// The position of the next batch.
    pub cursor: Cursor,
}

impl Batcher {
    /// A batcher over `n` samples from `cursor`.
    pub fn new(n: usize, batch: usize, seed: u64, cursor: Cursor) -> Result<Batcher> {
        if batch == 0 || n < batch {
            return Err(TrainError::BadData(format!(
                "the train partition has {n} samples, fewer than one batch of {batch}"
            )));
        }
        let mut b = Batcher {
            n,
            batch,
            seed,
            perm: Vec::new(),
            cursor,
        };
        b.shuffle();
        Ok(b)
    }

    fn shuffle(&mut self) {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(self.seed ^ mix(self.cursor.epoch)));
        self.perm = (0..self.n).collect();
        self.perm.shuffle(&mut rng);
    }

    /// The next micro-batch's sample indices.
    pub fn next_batch(&mut self) -> Vec<usize> {
        if self.cursor.pos + self.batch > self.n {
            self.cursor = Cursor {
                epoch: self.cursor.epoch + 1,
                pos: 0,
            };
            self.shuffle();
        }
        let rows = self.perm[self.cursor.pos..self.cursor.pos + self.batch].to_vec();
        self.cursor.pos += self.batch;
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_resume_from_the_cursor() {
        let mut a = Batcher::new(10, 3, 1, Cursor::default()).unwrap();
        let first: Vec<Vec<usize>> = (0..5).map(|_| a.next_batch()).collect();
        let mut b = Batcher::new(10, 3, 1, Cursor::default()).unwrap();
        b.next_batch();
        b.next_batch();
        let mut c = Batcher::new(10, 3, 1, b.cursor).unwrap();
        assert_eq!(c.next_batch(), first[2]);
        assert_eq!(c.next_batch(), first[3], "crosses into epoch 1");
        assert_eq!(c.cursor.epoch, 1);
        let mut seen: Vec<usize> = first[..3].concat();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 9, "an epoch draws without replacement");
    }

    #[test]
    fn classes_are_sorted() {
        let c = Classes::from_labels(&["spam".into(), "ham".into(), "spam".into()]);
        assert_eq!(c.names, ["ham", "spam"]);
        assert_eq!(c.index("spam"), Some(1));
        assert_eq!(c.index("eggs"), None);
    }
}
