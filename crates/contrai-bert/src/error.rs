//! Why a model directory could not be used: each error names the file and what was expected.

use std::path::PathBuf;

/// An error reading or running a BERT-family model directory.
#[derive(Debug, thiserror::Error)]
pub enum BertError {
    /// A file the directory must hold is not there.
    #[error(
        "{dir}: no {file} — a Hugging Face model directory holds config.json, model.safetensors and tokenizer.json (save_pretrained writes them)"
    )]
    Missing {
        /// The directory.
        dir: PathBuf,
        /// The file it lacks.
        file: &'static str,
    },
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `config.json` does not parse or describes no usable model.
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong and what was expected.
        message: String,
    },
    /// The architecture is not one this crate runs.
    #[error(
        "{path}: model_type `{found}` is not supported; expected `bert` (BERT, MiniLM and other checkpoints saved as BertModel share its layout)"
    )]
    Architecture {
        /// `config.json`.
        path: PathBuf,
        /// Its model_type.
        found: String,
    },
    /// The weights do not fit the config.
    #[error("{path}: the weights do not match config.json: {message}")]
    Weights {
        /// `model.safetensors`.
        path: PathBuf,
        /// Which tensors, with expected and found shapes.
        message: String,
    },
    /// `tokenizer.json` does not parse.
    #[error("{path}: not a tokenizer file the `tokenizers` library reads ({message})")]
    Tokenizer {
        /// `tokenizer.json`.
        path: PathBuf,
        /// The library's message.
        message: String,
    },
}

/// Results of this crate.
pub type Result<T, E = BertError> = std::result::Result<T, E>;
