//! The checkpoint's own tokenizer (`tokenizer.json`, read by Hugging Face's `tokenizers`):
//! normalisation, word pieces and special tokens as the file says, truncated and padded to the
//! recipe's length.

use std::path::{Path, PathBuf};

use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::error::{BertError, Result};

/// A batch of tokenised texts, row-major `[texts, len]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tokens {
    /// Token ids.
    pub ids: Vec<i32>,
    /// Token types.
    pub type_ids: Vec<i32>,
    /// 1 for real tokens, 0 for padding.
    pub mask: Vec<f32>,
    /// Tokens a text.
    pub len: usize,
}

/// A tokenizer that gives every text exactly `len` tokens.
#[derive(Clone)]
pub struct BertTokenizer {
    inner: Tokenizer,
    len: usize,
    pad_id: u32,
    path: PathBuf,
}

impl std::fmt::Debug for BertTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BertTokenizer(vocab {}, len {})",
            self.inner.get_vocab_size(true),
            self.len
        )
    }
}

impl BertTokenizer {
    /// Reads `path`; texts are cut (special tokens included) or padded to `len` tokens.
    pub fn read(path: &Path, len: usize) -> Result<BertTokenizer> {
        let bad = |message: String| BertError::Tokenizer {
            path: path.to_path_buf(),
            message,
        };
        let mut inner = Tokenizer::from_file(path).map_err(|e| bad(e.to_string()))?;
        let pad = inner.get_padding().cloned().unwrap_or_else(|| PaddingParams {
            pad_id: inner.token_to_id("[PAD]").unwrap_or(0),
            pad_token: "[PAD]".into(),
            ..PaddingParams::default()
        });
        let pad_id = pad.pad_id;
        inner.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::Fixed(len),
            ..pad
        }));
        inner
            .with_truncation(Some(TruncationParams {
                max_length: len,
                ..TruncationParams::default()
            }))
            .map_err(|e| bad(e.to_string()))?;
        Ok(BertTokenizer {
            inner,
            len,
            pad_id,
            path: path.to_path_buf(),
        })
    }

    /// Tokens a text.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether texts get no tokens (never, for a usable tokenizer).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The id padding fills a short text with.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The `tokenizer.json` it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Ids in the vocabulary, special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Tokenises `texts`, with the special tokens the file's post-processor adds.
    pub fn encode(&self, texts: &[&str]) -> Result<Tokens> {
        let encs = self
            .inner
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| BertError::Tokenizer {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
        let mut t = Tokens {
            ids: Vec::with_capacity(texts.len() * self.len),
            type_ids: Vec::with_capacity(texts.len() * self.len),
            mask: Vec::with_capacity(texts.len() * self.len),
            len: self.len,
        };
        for e in &encs {
            t.ids.extend(e.get_ids().iter().map(|&i| i as i32));
            t.type_ids.extend(e.get_type_ids().iter().map(|&i| i as i32));
            t.mask.extend(e.get_attention_mask().iter().map(|&m| m as f32));
        }
        Ok(t)
    }
}
