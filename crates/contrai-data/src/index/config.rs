//! How the index is built: what the text field holds and the near-copy parameters (MinHash
//! permutations, thresholds, the fingerprint cache), with the banding each rule takes.

use super::SHINGLE_CACHE;
use crate::error::{DataError, Result};
use crate::minhash::{Banding, KeyLayout};
use crate::near::{EDIT_BANDS_AGREEING, EDIT_JACCARD, EDIT_RECALL, EditRule, NearCopy};
use crate::text::Shingling;

/// What the text field holds, which decides what "the same sample" means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Content {
    /// Natural-language text: normalised for exact duplicates, shingled for near-duplicates.
    #[default]
    Text,
    /// A vector of numbers (an MLP's features): duplicates are equal vectors; there is no
    /// near-duplicate search and no text check (emptiness aside).
    Numeric,
}

impl Content {
    pub(super) fn is_text(&self) -> bool {
        *self == Content::Text
    }
}

/// What a near-copy is and how candidates are found.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IndexConfig {
    /// What the text field holds (written into manifests only when not text).
    #[serde(default, skip_serializing_if = "Content::is_text")]
    pub content: Content,
    /// Verified Jaccard similarity at or above which two texts are near-copies (rule 2).
    pub threshold: f64,
    /// Texts a few words apart are near-copies (rule 1). A manifest written before the rule
    /// existed has none, and a new version of that split keeps its parent's definition.
    #[serde(default)]
    pub edits: Option<EditRule>,
    /// MinHash functions a signature.
    pub num_perm: usize,
    /// Probability of finding a pair right at the threshold, used to choose the banding.
    pub recall_at_threshold: f64,
    /// Shingling.
    pub shingling: Shingling,
    /// Fingerprint hashes kept from pass 1: while all fit, pass 2 (re-reading candidates' texts)
    /// is skipped; beyond it the cache is dropped, so memory stays proportional to the samples.
    #[serde(skip, default = "default_cache")]
    pub shingle_cache: usize,
}

fn default_cache() -> usize {
    SHINGLE_CACHE
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            content: Content::Text,
            threshold: 0.8,
            edits: Some(EditRule::default()),
            num_perm: 256,
            recall_at_threshold: 0.99,
            shingling: Shingling::default(),
            shingle_cache: SHINGLE_CACHE,
        }
    }
}

impl IndexConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<()> {
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(DataError::Param(format!(
                "threshold {} is not in (0, 1]",
                self.threshold
            )));
        }
        if !(16..=4096).contains(&self.num_perm) {
            return Err(DataError::Param(format!(
                "num_perm {} is not in 16..=4096",
                self.num_perm
            )));
        }
        if self.shingling.word_ngram == 0 || self.shingling.char_ngram == 0 {
            return Err(DataError::Param("shingle sizes must be at least 1".into()));
        }
        if let Some(rule) = &self.edits {
            rule.validate().map_err(DataError::Param)?;
        }
        Ok(())
    }

    /// Rule 1 with words changing at most at `share` of the longer text's (0: no rule 1).
    pub fn with_edit_share(self, share: f64) -> IndexConfig {
        IndexConfig {
            edits: (share > 0.0).then(|| EditRule {
                share,
                ..self.edits.unwrap_or_default()
            }),
            ..self
        }
    }

    /// Rule 2's LSH banding.
    pub fn banding(&self) -> Banding {
        Banding::for_recall(self.num_perm, self.threshold, self.recall_at_threshold)
    }

    /// Every candidate key a text has.
    pub fn layout(&self) -> KeyLayout {
        KeyLayout {
            jaccard: self.banding(),
            edits: self.edits.map(|rule| (edit_banding(self.num_perm), rule)),
        }
    }

    /// The definition candidates are verified against.
    pub fn near_copy(&self) -> NearCopy {
        NearCopy {
            threshold: self.threshold,
            shingling: self.shingling,
            edits: self.edits,
        }
    }
}

/// Rule 1's banding for `num_perm` permutations.
fn edit_banding(num_perm: usize) -> Banding {
    Banding::for_recall_agreeing(num_perm, EDIT_JACCARD, EDIT_RECALL, EDIT_BANDS_AGREEING)
}
