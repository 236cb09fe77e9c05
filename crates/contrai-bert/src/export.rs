//! A fine-tuned classifier written back as a Hugging Face model directory: the weights under
//! `BertForSequenceClassification`'s names and layouts, its config with the labels, the
//! checkpoint's tokenizer files — what `transformers`' `from_pretrained` reads. A mean-pooled
//! model (which that class cannot compute: it pools [CLS]) comes with its own modeling file,
//! named by the config's `auto_map`, so that the standard loaders compute what Contrai computed.

use std::path::Path;

use burn::store::{BurnToPyTorchAdapter, ModuleSnapshot, SafetensorsStore};

use crate::config::BertConfig;
use crate::error::{BertError, Result};
use crate::load::{TOKENIZER, WEIGHTS};
use crate::model::{BertClassifier, Pooling};

/// Tokenizer files copied beside the weights when the checkpoint has them.
const TOKENIZER_FILES: [&str; 3] = [TOKENIZER, "special_tokens_map.json", "vocab.txt"];

/// The tokenizer's config: the checkpoint's, naming BERT's tokenizer class when it does not (a
/// model type transformers does not know cannot tell it).
const TOKENIZER_CONFIG: &str = "tokenizer_config.json";

/// The modeling file of a mean-pooled classifier, written beside its weights.
pub const MEAN_MODELING: (&str, &str) = (
    "modeling_contrai.py",
    include_str!("../python/modeling_contrai.py"),
);

/// The class of [`MEAN_MODELING`] that `auto_map` names.
const MEAN_CLASS: &str = "ContraiBertForSequenceClassification";

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
    if model.pooling == Pooling::Mean {
        let (name, text) = MEAN_MODELING;
        files.push((name.to_string(), text.as_bytes().to_vec()));
    }
    for f in TOKENIZER_FILES {
        let p = source.join(f);
        if p.is_file() {
            let bytes = std::fs::read(&p).map_err(|e| BertError::Io { path: p, source: e })?;
            files.push((f.to_string(), bytes));
        }
    }
    files.push((TOKENIZER_CONFIG.to_string(), tokenizer_config(source)?));
    Ok(files)
}

/// The checkpoint's tokenizer config (an empty one when it has none, or one that is no JSON
/// object), with `tokenizer_class` set to BERT's when it names none.
fn tokenizer_config(source: &Path) -> Result<Vec<u8>> {
    let p = source.join(TOKENIZER_CONFIG);
    let mut v = match std::fs::read(&p) {
        Ok(bytes) => serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_default(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Value::Null,
        Err(e) => return Err(BertError::Io { path: p, source: e }),
    };
    if !v.is_object() {
        v = serde_json::json!({});
    }
    if v.get("tokenizer_class").is_none() {
        v["tokenizer_class"] = "BertTokenizer".into();
    }
    Ok(serde_json::to_vec_pretty(&v).unwrap_or_default())
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
/// model names its own class through `auto_map` instead (transformers' class pools [CLS]).
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
        // A model type of its own: transformers has no local class to fall back on, so a
        // loader without `trust_remote_code` refuses instead of pooling [CLS].
        let module = MEAN_MODELING.0.trim_end_matches(".py");
        v["model_type"] = "contrai_bert".into();
        v["architectures"] = serde_json::json!([MEAN_CLASS]);
        v["auto_map"] = serde_json::json!({
            "AutoConfig": format!("{module}.ContraiBertConfig"),
            "AutoModelForSequenceClassification": format!("{module}.{MEAN_CLASS}"),
        });
    }
    serde_json::to_vec_pretty(&v).unwrap_or_default()
}
