//! A Hugging Face model directory read into a [`BertClassifier`]: `config.json` checked,
//! `model.safetensors` mapped onto the Burn modules (names renamed, linear weights transposed,
//! shapes checked against the config), `tokenizer.json` read.

use std::path::{Path, PathBuf};

use burn::store::{ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore};
use burn::tensor::Device;

use crate::config::BertConfig;
use crate::error::{BertError, Result};
use crate::model::{BertClassifier, Pooling};
use crate::tokenize::BertTokenizer;

/// `config.json`.
pub const CONFIG: &str = "config.json";
/// `model.safetensors`.
pub const WEIGHTS: &str = "model.safetensors";
/// `tokenizer.json`.
pub const TOKENIZER: &str = "tokenizer.json";

/// A model directory's files, present and named.
#[derive(Debug, Clone)]
pub struct ModelDir {
    /// The directory.
    pub dir: PathBuf,
    /// Its checked config.
    pub config: BertConfig,
}

impl ModelDir {
    /// Checks that `dir` holds the three files and reads the config.
    pub fn open(dir: &Path) -> Result<ModelDir> {
        for file in [CONFIG, WEIGHTS, TOKENIZER] {
            if !dir.join(file).is_file() {
                return Err(BertError::Missing {
                    dir: dir.to_path_buf(),
                    file,
                });
            }
        }
        Ok(ModelDir {
            dir: dir.to_path_buf(),
            config: BertConfig::read(&dir.join(CONFIG))?,
        })
    }

    /// The tokenizer, giving `len` tokens a text (at most the config's positions).
    pub fn tokenizer(&self, len: usize) -> Result<BertTokenizer> {
        let max = self.config.max_position_embeddings;
        if len == 0 || len > max {
            return Err(BertError::Config {
                path: self.dir.join(CONFIG),
                message: format!("a sequence length of {len} does not fit max_position_embeddings {max}"),
            });
        }
        let t = BertTokenizer::read(&self.dir.join(TOKENIZER), len)?;
        if t.vocab_size() > self.config.vocab_size {
            return Err(BertError::Tokenizer {
                path: self.dir.join(TOKENIZER),
                message: format!(
                    "its {} ids do not fit the model's vocab_size {}",
                    t.vocab_size(),
                    self.config.vocab_size
                ),
            });
        }
        Ok(t)
    }

    /// The classifier with the checkpoint's encoder weights; the head (and, for mean pooling,
    /// the pooler) keeps its fresh values unless the file has them.
    pub fn classifier(&self, classes: usize, pooling: Pooling, device: &Device) -> Result<BertClassifier> {
        let path = self.dir.join(WEIGHTS);
        let mut model = BertClassifier::new(&self.config, classes, pooling, device);
        let mut store = hf_names(SafetensorsStore::from_file(&path))
            .with_from_adapter(PyTorchToBurnAdapter)
            .allow_partial(true)
            .validate(false);
        let bad = |message: String| BertError::Weights {
            path: path.clone(),
            message,
        };
        let applied = model.load_from(&mut store).map_err(|e| bad(e.to_string()))?;
        if !applied.errors.is_empty() {
            let e: Vec<String> = applied.errors.iter().map(|e| e.to_string()).collect();
            return Err(bad(e.join("; ")));
        }
        let optional = |p: &str| {
            p.starts_with("classifier.") || (pooling == Pooling::Mean && p.starts_with("bert.pooler."))
        };
        let missing: Vec<&str> = applied
            .missing
            .iter()
            .map(|(p, _)| p.as_str())
            .filter(|p| !optional(p))
            .collect();
        if !missing.is_empty() {
            return Err(bad(format!(
                "{} tensors the config implies are not in the file: {}",
                missing.len(),
                missing.iter().take(6).copied().collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(model)
    }
}

/// The store reading Hugging Face's names as this crate's modules name them.
fn hf_names(store: SafetensorsStore) -> SafetensorsStore {
    store
        .with_key_remapping(r"^(embeddings|encoder|pooler)\.", "bert.$1.")
        .with_key_remapping(r"\.LayerNorm\.", ".layer_norm.")
        .with_key_remapping(r"\.attention\.self\.", ".attention.self_attn.")
}
