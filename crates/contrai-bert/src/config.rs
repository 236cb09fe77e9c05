//! `config.json` of a BERT-family checkpoint: the fields the forward pass needs, checked.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{BertError, Result};

/// The architecture, as `config.json` states it (Hugging Face's `BertConfig` field names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BertConfig {
    /// Must be `bert`.
    pub model_type: String,
    /// Token ids.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads a layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Positions the position embeddings cover.
    pub max_position_embeddings: usize,
    /// Token types (segments).
    #[serde(default = "two")]
    pub type_vocab_size: usize,
    /// The LayerNorm epsilon.
    #[serde(default = "eps")]
    pub layer_norm_eps: f64,
    /// Dropout on embeddings and sublayer outputs.
    #[serde(default = "tenth")]
    pub hidden_dropout_prob: f64,
    /// Dropout on attention probabilities.
    #[serde(default = "tenth")]
    pub attention_probs_dropout_prob: f64,
    /// The feed-forward activation; `gelu` (exact, erf) is supported.
    #[serde(default = "gelu")]
    pub hidden_act: String,
    /// `absolute` is supported.
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
    /// The padding token's id.
    #[serde(default)]
    pub pad_token_id: usize,
    /// Every other field, kept so that an exported config keeps them.
    #[serde(flatten)]
    pub rest: serde_json::Map<String, serde_json::Value>,
}

fn two() -> usize {
    2
}
fn eps() -> f64 {
    1e-12
}
fn tenth() -> f64 {
    0.1
}
fn gelu() -> String {
    "gelu".into()
}
fn absolute() -> String {
    "absolute".into()
}

/// The model types read as BERT: BERT's own, and Contrai's mean-pooled export of it
/// (`export::MEAN_MODELING`), which `contrai predict` reads back from `final/hf/`.
const MODEL_TYPES: [&str; 2] = ["bert", "contrai_bert"];

impl BertConfig {
    /// Reads and checks `path`.
    pub fn read(path: &Path) -> Result<BertConfig> {
        let text = std::fs::read_to_string(path).map_err(|source| BertError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |message: String| BertError::Config {
            path: path.to_path_buf(),
            message,
        };
        let probe: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let found = probe
            .get("model_type")
            .and_then(|v| v.as_str())
            .unwrap_or("(none)");
        if !MODEL_TYPES.contains(&found) {
            return Err(BertError::Architecture {
                path: path.to_path_buf(),
                found: found.to_string(),
            });
        }
        let c: BertConfig =
            serde_json::from_value(probe).map_err(|e| bad(format!("{e} (a BertConfig's fields)")))?;
        c.check().map_err(bad)?;
        Ok(c)
    }

    /// What makes the config unusable, in words.
    fn check(&self) -> std::result::Result<(), String> {
        if self.hidden_act != "gelu" {
            return Err(format!(
                "hidden_act `{}` is not supported; expected `gelu`",
                self.hidden_act
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type `{}` is not supported; expected `absolute`",
                self.position_embedding_type
            ));
        }
        let heads = self.num_attention_heads;
        if heads == 0 || self.hidden_size == 0 || !self.hidden_size.is_multiple_of(heads) {
            return Err(format!(
                "hidden_size {} must be a positive multiple of num_attention_heads {heads}",
                self.hidden_size
            ));
        }
        if self.vocab_size == 0 || self.max_position_embeddings == 0 || self.intermediate_size == 0 {
            return Err("vocab_size, max_position_embeddings and intermediate_size must be positive".into());
        }
        Ok(())
    }
}
