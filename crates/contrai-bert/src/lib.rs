//! BERT-family encoders from Hugging Face model directories (`config.json`,
//! `model.safetensors`, `tokenizer.json`): the config checked, the tokenizer the checkpoint was
//! trained with, the weights mapped onto a Burn model whose forward pass matches `transformers`.
//!
//! BERT and MiniLM (and any checkpoint whose `model_type` is `bert`: the `BertModel` /
//! `BertForSequenceClassification` layout, absolute positions, exact GELU) are supported; other
//! architectures are refused by name.

#![warn(missing_docs)]

pub mod config;
pub mod error;
pub mod export;
pub mod load;
pub mod model;
pub mod tokenize;

pub use config::BertConfig;
pub use error::{BertError, Result};
pub use load::ModelDir;
pub use model::{BertClassifier, Dropper, Inputs, NoDropout, Pooling};
pub use tokenize::{BertTokenizer, Tokens};
