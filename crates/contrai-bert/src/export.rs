//! A fine-tuned classifier written back as a Hugging Face model directory: the weights under
//! `BertForSequenceClassification`'s names and layouts, its config with the labels, the
//! checkpoint's tokenizer files — what `transformers`' `from_pretrained` reads.

use std::path::Path;

use burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, SafetensorsStore};

use crate::config::BertConfig;
use crate::error::{BertError, Result};
use crate::load::{TOKENIZER, WEIGHTS};
use crate::model::{BertClassifier, Pooling};

/// Tokenizer files copied beside the weights when the checkpoint has them.
const TOKENIZER_FILES: [&str; 4] = [
    TOKENIZER,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
];

/// The files of the exported directory, by name.
pub fn export(
    model: &BertClassifier,
    config: &BertConfig,
    labels: &[String],
    source: &Path,
) -> Result<Vec<(String, Vec<u8>)>> {
    let weights = weights(model).map_err(|message| BertError::Weights {
        path: source.join(WEIGHTS),
        message,
    })?;
    let mut files = vec![
        (WEIGHTS.to_string(), weights),
        (
            "config.json".to_string(),
            config_json(config, labels, model.pooling),
        ),
    ];
    for f in TOKENIZER_FILES {
        let p = source.join(f);
        if p.is_file() {
            let bytes = std::fs::read(&p).map_err(|e| BertError::Io { path: p, source: e })?;
            files.push((f.to_string(), bytes));
        }
    }
    Ok(files)
}

/// The weights as safetensors under Hugging Face's names (linear weights `[out, in]`,
/// LayerNorm `weight`/`bias`).
fn weights(model: &BertClassifier) -> std::result::Result<Vec<u8>, String> {
    let mut store = SafetensorsStore::from_bytes(None)
        .with_to_adapter(BurnToPyTorchAdapter)
        .with_key_remapping(r"\.layer_norm\.", ".LayerNorm.")
        .with_key_remapping(r"\.attention\.self_attn\.", ".attention.self.");
    model.save_into(&mut store).map_err(|e| e.to_string())?;
    store.get_bytes().map_err(|e| e.to_string())
}

/// The checkpoint's config as a `BertForSequenceClassification` of `labels`; a mean-pooled
/// model says so (transformers' class pools [CLS]).
fn config_json(config: &BertConfig, labels: &[String], pooling: Pooling) -> Vec<u8> {
    let mut v = serde_json::to_value(config).unwrap_or_default();
    let id2label: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| (i.to_string(), l.clone().into()))
        .collect();
    let label2id: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| (l.clone(), i.into()))
        .collect();
    v["architectures"] = serde_json::json!(["BertForSequenceClassification"]);
    v["id2label"] = id2label.into();
    v["label2id"] = label2id.into();
    v["num_labels"] = labels.len().into();
    if pooling == Pooling::Mean {
        v["contrai_pooling"] = "mean".into();
    }
    serde_json::to_vec_pretty(&v).unwrap_or_default()
}
