//! Encoded partitions and the seeded batch order, resumable from a two-number cursor.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::data::Samples;
use crate::dropout::mix;
use crate::error::{Result, TrainError};
use crate::tokenizer::Tokenizer;

/// A partition as padded token ids (`seq` a sample) and class indices.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// Row-major ids, `len() * seq`.
    pub ids: Vec<i32>,
    /// Class index of each sample.
    pub labels: Vec<i32>,
    /// Tokens a sample.
    pub seq: usize,
}

impl Encoded {
    /// Encodes `samples` with `tok`, labels mapped through `classes`.
    pub fn new(
        samples: &Samples,
        tok: &Tokenizer,
        classes: &Classes,
        seq: usize,
        part: &str,
    ) -> Result<Encoded> {
        let mut ids = vec![0i32; samples.len() * seq];
        for (row, text) in ids.chunks_mut(seq).zip(&samples.texts) {
            for (slot, id) in row.iter_mut().zip(tok.encode(text, seq)) {
                *slot = id as i32;
            }
        }
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
        Ok(Encoded { ids, labels, seq })
    }

    /// Samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Ids and labels of the samples `rows`.
    pub fn gather(&self, rows: &[usize]) -> (Vec<i32>, Vec<i32>) {
        let mut ids = Vec::with_capacity(rows.len() * self.seq);
        for &r in rows {
            ids.extend_from_slice(&self.ids[r * self.seq..(r + 1) * self.seq]);
        }
        (ids, rows.iter().map(|&r| self.labels[r]).collect())
    }

    /// The samples `rows`, in that order.
    pub fn subset(&self, rows: &[usize]) -> Encoded {
        let (ids, labels) = self.gather(rows);
        Encoded {
            ids,
            labels,
            seq: self.seq,
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
