//! The near-copy definition checked by brute force, apart from the index: shingle Jaccard by
//! `Shingling`, word edits by the full dynamic programme over the words themselves.

#![allow(dead_code)]

use contrai_data::near::EditRule;
use contrai_data::text::{Shingling, jaccard, normalize};

/// The definition, as README states it.
pub struct Reference {
    pub threshold: f64,
    pub shingling: Shingling,
    pub rule: EditRule,
}

impl Default for Reference {
    fn default() -> Self {
        Reference {
            threshold: 0.8,
            shingling: Shingling::default(),
            rule: EditRule::default(),
        }
    }
}

/// A text as the reference compares it.
pub struct Text {
    pub norm: String,
    shingles: Vec<u64>,
    /// Its words (the bag-of-words bound).
    bag: Vec<String>,
}

impl Reference {
    pub fn text(&self, raw: &str) -> Text {
        let norm = normalize(raw);
        let bag: Vec<String> = norm.split_whitespace().map(str::to_string).collect();
        Text {
            shingles: self.shingling.shingles(&norm),
            norm,
            bag,
        }
    }

    /// Whether two different, non-empty texts are near-copies.
    pub fn near(&self, a: &Text, b: &Text) -> bool {
        if a.norm.is_empty() || b.norm.is_empty() || a.norm == b.norm {
            return false;
        }
        if jaccard(&a.shingles, &b.shingles) >= self.threshold {
            return true;
        }
        let longer = a.bag.len().max(b.bag.len());
        let budget = self.rule.budget(longer);
        // Each edit loses at most one shared word: a cheap bound before the full programme.
        if budget == 0 || common(&a.bag, &b.bag) + budget < longer {
            return false;
        }
        let words = |t: &Text| t.norm.split(' ').map(str::to_string).collect::<Vec<_>>();
        levenshtein(&words(a), &words(b)) <= budget
    }

    /// Every pair of near-copies among `texts`, by brute force.
    pub fn pairs(&self, texts: &[Text]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for i in 0..texts.len() {
            for j in i + 1..texts.len() {
                if self.near(&texts[i], &texts[j]) {
                    out.push((i, j));
                }
            }
        }
        out
    }
}

/// Words two bags share, counted with repeats.
fn common(a: &[String], b: &[String]) -> usize {
    let mut counts: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
    for w in a {
        *counts.entry(w).or_default() += 1;
    }
    b.iter()
        .filter(|w| {
            let n = counts.entry(w.as_str()).or_default();
            *n -= 1;
            *n >= 0
        })
        .count()
}

/// The Levenshtein distance of two sequences (words, hashes), every cell computed.
pub fn levenshtein<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            row[j] = (prev[j - 1] + usize::from(a[i - 1] != b[j - 1]))
                .min(prev[j] + 1)
                .min(row[j - 1] + 1);
        }
        prev = row;
    }
    prev[b.len()]
}
