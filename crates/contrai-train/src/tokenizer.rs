//! The tokenizer: a word vocabulary fitted on the train partition only, with hashed OOV buckets.
//!
//! Why a scheme of our own rather than the `tokenizers` crate: its trainers (BPE, WordPiece,
//! Unigram) pull in a large dependency tree for what a short-sequence classifier does not need,
//! and their output depends on thread scheduling details we would have to pin for exact resume.
//! A word vocabulary is fitted in one pass, is deterministic by construction (ties broken by the
//! word itself), and on classification tasks of this size matches sub-word vocabularies. Words
//! the vocabulary lacks are not collapsed into one `[UNK]`: they are hashed (xxh3, stable across
//! platforms and versions) into reserved buckets, so rare words still carry signal.
//!
//! Layout of ids: `0` = `[PAD]`, `1` = `[UNK]` (only for vocabularies too small to hold
//! buckets), `2 .. 2 + buckets` = OOV buckets, then words by descending train frequency.
//! Text is normalised with the data stage's [`contrai_data::text::normalize`] (NFKC, lowercase),
//! then split into runs of alphanumeric characters; every other non-space character (`!`, `$`,
//! `@` ...) is a token of its own.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Result, TrainError};

/// Id of the unknown-word token (used only when there are no buckets).
pub const UNK: u32 = 1;
/// Format tag written into `tokenizer.json`.
pub const FORMAT: &str = "contrai-words-v1";

/// A fitted word tokenizer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tokenizer {
    /// Format tag ([`FORMAT`]).
    pub format: String,
    /// Total ids, special and bucket ids included (the model's vocabulary size).
    pub size: u32,
    /// OOV hash buckets.
    pub buckets: u32,
    /// Words in id order, starting at id `2 + buckets`.
    pub words: Vec<String>,
    #[serde(skip)]
    index: HashMap<String, u32>,
}

/// Splits normalised text into word and symbol tokens.
pub fn pieces(normalized: &str) -> impl Iterator<Item = &str> {
    let mut rest = normalized;
    std::iter::from_fn(move || {
        rest = rest.trim_start();
        let first = rest.chars().next()?;
        let end = if first.is_alphanumeric() {
            rest.find(|c: char| !c.is_alphanumeric()).unwrap_or(rest.len())
        } else {
            first.len_utf8()
        };
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

impl Tokenizer {
    /// Fits a vocabulary of `size` ids on `texts` (the train partition, nothing else).
    pub fn fit<'a>(texts: impl IntoIterator<Item = &'a str>, size: usize) -> Result<Tokenizer> {
        if size < 2 {
            return Err(TrainError::Unsupported(format!(
                "model.vocab = {size}: the vocabulary needs at least 2 ids"
            )));
        }
        let mut counts: HashMap<String, u64> = HashMap::new();
        for text in texts {
            let norm = contrai_data::text::normalize(text);
            for p in pieces(&norm) {
                *counts.entry(p.to_string()).or_default() += 1;
            }
        }
        let buckets = if size >= 64 { (size / 64) as u32 } else { 0 };
        let room = size.saturating_sub(2 + buckets as usize);
        let mut ranked: Vec<(String, u64)> = counts.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(room);
        let mut tok = Tokenizer {
            format: FORMAT.into(),
            size: size as u32,
            buckets,
            words: ranked.into_iter().map(|(w, _)| w).collect(),
            index: HashMap::new(),
        };
        tok.build_index();
        Ok(tok)
    }

    fn build_index(&mut self) {
        let base = 2 + self.buckets;
        self.index = self
            .words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), base + i as u32))
            .collect();
    }

    /// The id of one token.
    pub fn id(&self, piece: &str) -> u32 {
        if let Some(&id) = self.index.get(piece) {
            id
        } else if self.buckets > 0 {
            2 + (xxh3_64(piece.as_bytes()) % u64::from(self.buckets)) as u32
        } else {
            UNK
        }
    }

    /// Token ids of `text`, cut at `max_len`.
    pub fn encode(&self, text: &str, max_len: usize) -> Vec<u32> {
        let norm = contrai_data::text::normalize(text);
        pieces(&norm).take(max_len).map(|p| self.id(p)).collect()
    }

    /// Writes `tokenizer.json` atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        Ok(contrai_run::write_json(path, self)?)
    }

    /// Reads a tokenizer written by [`Tokenizer::save`].
    pub fn load(path: &Path) -> Result<Tokenizer> {
        let bytes = std::fs::read(path).map_err(|e| TrainError::io(path, e))?;
        let bad = |message: String| TrainError::Corrupt {
            path: path.to_path_buf(),
            message,
        };
        let mut tok: Tokenizer =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("not a tokenizer: {e}")))?;
        if tok.format != FORMAT {
            return Err(bad(format!("unknown tokenizer format `{}`", tok.format)));
        }
        if 2 + tok.buckets as usize + tok.words.len() > tok.size as usize {
            return Err(bad("more words than ids".into()));
        }
        tok.build_index();
        Ok(tok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_words_and_symbols() {
        let p: Vec<&str> = pieces("win $1000 now!! café").collect();
        assert_eq!(p, ["win", "$", "1000", "now", "!", "!", "café"]);
    }

    #[test]
    fn frequent_words_get_ids_and_oov_words_hash_into_buckets() {
        let texts = ["the cat", "the dog", "The bird"];
        let tok = Tokenizer::fit(texts.iter().copied(), 70).unwrap();
        assert_eq!(tok.buckets, 1);
        assert_eq!(tok.words[0], "the");
        assert_eq!(tok.id("the"), 3);
        assert_eq!(tok.id("zebra"), 2, "one bucket takes every OOV word");
        assert_eq!(tok.encode("THE cat zebra", 2), vec![3, tok.id("cat")]);
    }

    #[test]
    fn save_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let tok = Tokenizer::fit(["a b c a"].iter().copied(), 128).unwrap();
        let path = dir.path().join("tokenizer.json");
        tok.save(&path).unwrap();
        assert_eq!(
            Tokenizer::load(&path).unwrap().encode("a c q", 8),
            tok.encode("a c q", 8)
        );
    }
}
