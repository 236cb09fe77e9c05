//! The built-in demo dataset: product reviews with planted defects whose ground truth is known.
//!
//! Defects: exact copies (byte-identical or differing only in case and spacing), near copies at
//! known word-edit rates, families of near copies that a random split would scatter across
//! partitions, flipped labels inside duplicate clusters (label conflicts) and on singletons
//! (label noise), empty and near-empty texts, and length outliers.

use std::sync::Arc;

use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::read::Source;
use crate::text::{Shingling, jaccard, normalize};

/// Word-edit rates of the planted near copies.
pub const EDIT_RATES: [f64; 6] = [0.005, 0.01, 0.02, 0.03, 0.05, 0.10];
/// Labels of the demo set.
pub const LABELS: [&str; 2] = ["negative", "positive"];

/// Size and seed of the demo set.
#[derive(Debug, Clone, Copy)]
pub struct DemoConfig {
    /// Original reviews before defects are added.
    pub base: usize,
    /// Seed of everything random.
    pub seed: u64,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig { base: 4000, seed: 7 }
    }
}

/// The generated rows and what was planted in them (indices are row numbers, 0-based).
#[derive(Debug, Clone)]
pub struct DemoSet {
    /// JSONL lines with `id`, `text` and `label`.
    pub lines: Vec<String>,
    /// The ground truth.
    pub truth: DemoTruth,
}

/// What the generator planted.
#[derive(Debug, Clone, Default)]
pub struct DemoTruth {
    /// Each row's label as written.
    pub labels: Vec<usize>,
    /// Each row's true label (before any flip).
    pub true_labels: Vec<usize>,
    /// (original, copy) pairs whose normalised texts are identical.
    pub exact_copies: Vec<(usize, usize)>,
    /// (original, copy, edit rate) near copies.
    pub near_copies: Vec<(usize, usize, f64)>,
    /// Families of near copies of one original (original first).
    pub families: Vec<Vec<usize>>,
    /// (original, copy) pairs whose copy carries the flipped label; the pair's Jaccard is ≥ 0.85.
    pub conflicts: Vec<(usize, usize)>,
    /// Singleton rows whose label was flipped.
    pub noisy: Vec<usize>,
    /// Empty and near-empty rows.
    pub empty: Vec<usize>,
    /// Very long rows.
    pub outliers: Vec<usize>,
}

impl DemoSet {
    /// The demo set as an in-memory JSONL source.
    pub fn source(&self) -> Source {
        Source::Memory {
            name: "<demo>".into(),
            lines: Arc::new(self.lines.clone()),
        }
    }
}

/// Generates the demo set; the same config gives the same bytes.
pub fn generate(cfg: DemoConfig) -> DemoSet {
    let mut g = Gen {
        rng: ChaCha8Rng::seed_from_u64(cfg.seed),
        rows: Vec::new(),
        truth: DemoTruth::default(),
    };
    g.build(cfg.base.max(10));
    g.finish()
}

/// A row before ids are assigned.
struct Row {
    text: String,
    label: usize,
    true_label: usize,
}

struct Gen {
    rng: ChaCha8Rng,
    rows: Vec<Row>,
    truth: DemoTruth,
}

impl Gen {
    fn build(&mut self, base: usize) {
        for _ in 0..base {
            let label = usize::from(self.rng.random_bool(0.55));
            let text = self.review(label, 7..15);
            self.push(text, label);
        }
        let scale = |frac: f64| ((base as f64 * frac).round() as usize).max(1);
        for _ in 0..scale(0.03) {
            self.exact_copy(base);
        }
        for k in 0..scale(0.08) {
            self.near_copy(base, EDIT_RATES[k % EDIT_RATES.len()]);
        }
        for _ in 0..scale(0.01) {
            self.family(base);
        }
        self.plant_conflicts(scale(0.012));
        for _ in 0..scale(0.015) {
            let i = self.rng.random_range(0..base);
            if !self.in_duplicate(i) && !self.truth.noisy.contains(&i) {
                self.rows[i].label ^= 1;
                self.truth.noisy.push(i);
            }
        }
        for t in ["", " ", "ok", "great!", "meh", "n/a", "\t"] {
            let label = usize::from(self.rng.random_bool(0.5));
            let i = self.push(t.to_string(), label);
            self.truth.empty.push(i);
        }
        for _ in 0..scale(0.0015) {
            let label = usize::from(self.rng.random_bool(0.5));
            let text = self.review(label, 60..80);
            let i = self.push(text, label);
            self.truth.outliers.push(i);
        }
    }

    fn push(&mut self, text: String, label: usize) -> usize {
        self.rows.push(Row {
            text,
            label,
            true_label: label,
        });
        self.rows.len() - 1
    }

    fn in_duplicate(&self, i: usize) -> bool {
        let t = &self.truth;
        t.exact_copies.iter().any(|&(a, b)| a == i || b == i)
            || t.near_copies.iter().any(|&(a, b, _)| a == i || b == i)
    }

    /// A copy identical after normalisation: half byte for byte, half re-cased and re-spaced.
    fn exact_copy(&mut self, base: usize) {
        let i = self.rng.random_range(0..base);
        let text = if self.rng.random_bool(0.5) {
            self.rows[i].text.clone()
        } else {
            format!("  {}\n", self.rows[i].text.to_uppercase().replace(". ", ".  "))
        };
        let label = self.rows[i].label;
        let j = self.push(text, label);
        self.truth.exact_copies.push((i, j));
    }

    fn near_copy(&mut self, base: usize, rate: f64) -> usize {
        let i = self.rng.random_range(0..base);
        let text = self.edit(&self.rows[i].text.clone(), rate);
        let label = self.rows[i].label;
        let j = self.push(text, label);
        self.truth.near_copies.push((i, j, rate));
        j
    }

    /// Three to six near copies of one review, one or two words changed each: a split must keep
    /// them together.
    fn family(&mut self, base: usize) {
        let i = self.rng.random_range(0..base);
        let mut fam = vec![i];
        for _ in 0..self.rng.random_range(3..7) {
            let text = self.edit(&self.rows[i].text.clone(), 0.005);
            let label = self.rows[i].label;
            let j = self.push(text, label);
            self.truth.near_copies.push((i, j, 0.005));
            fam.push(j);
        }
        self.truth.families.push(fam);
    }

    /// Flips the label of copies that are clearly duplicates (Jaccard ≥ 0.85 with their original).
    fn plant_conflicts(&mut self, n: usize) {
        let sh = Shingling::default();
        let mut pairs: Vec<(usize, usize)> = self.truth.exact_copies.clone();
        pairs.extend(
            self.truth
                .near_copies
                .iter()
                .filter(|p| p.2 <= 0.01)
                .map(|&(a, b, _)| (a, b)),
        );
        pairs.shuffle(&mut self.rng);
        for (a, b) in pairs {
            if self.truth.conflicts.len() >= n {
                break;
            }
            if self
                .truth
                .conflicts
                .iter()
                .any(|&(x, y)| x == a || y == a || x == b || y == b)
            {
                continue;
            }
            let j = jaccard(
                &sh.shingles(&normalize(&self.rows[a].text)),
                &sh.shingles(&normalize(&self.rows[b].text)),
            );
            if j >= 0.85 {
                self.rows[b].label ^= 1;
                self.truth.conflicts.push((a, b));
            }
        }
    }

    /// Substitutes, deletes or inserts words at `rate` (at least one edit).
    fn edit(&mut self, text: &str, rate: f64) -> String {
        let words: Vec<&str> = text.split(' ').collect();
        let forced = self.rng.random_range(0..words.len());
        let mut out: Vec<String> = Vec::with_capacity(words.len() + 4);
        for (k, w) in words.iter().enumerate() {
            if k != forced && !self.rng.random_bool(rate) {
                out.push((*w).to_string());
                continue;
            }
            let fresh = (*FILLER.choose(&mut self.rng).expect("filler")).to_string();
            match self.rng.random_range(0..5) {
                0 => {}
                1 => {
                    out.push((*w).to_string());
                    out.push(fresh);
                }
                _ => out.push(fresh),
            }
        }
        out.join(" ")
    }

    /// A review of `sentences` sentences: mostly its class, some neutral, rarely the other class.
    fn review(&mut self, label: usize, sentences: std::ops::Range<usize>) -> String {
        let n = self.rng.random_range(sentences);
        let mut parts = Vec::with_capacity(n);
        for _ in 0..n {
            let r: f64 = self.rng.random();
            let pool = if r < 0.55 {
                label
            } else if r < 0.9 {
                2
            } else {
                label ^ 1
            };
            parts.push(self.sentence(pool));
        }
        parts.join(" ")
    }

    fn sentence(&mut self, pool: usize) -> String {
        let templates: &[&str] = match pool {
            0 => NEGATIVE,
            1 => POSITIVE,
            _ => NEUTRAL,
        };
        let t = *templates.choose(&mut self.rng).expect("templates");
        let mut out = String::with_capacity(t.len() + 32);
        let mut rest = t;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = open + rest[open..].find('}').expect("closed slot");
            out.push_str(self.fill(&rest[open + 1..close]));
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        out
    }

    fn fill(&mut self, slot: &str) -> &'static str {
        let pool: &[&'static str] = match slot {
            "product" => PRODUCTS,
            "aspect" => ASPECTS,
            "good" => GOOD,
            "bad" => BAD,
            "person" => PEOPLE,
            "time" => TIMES,
            "place" => PLACES,
            "n" => NUMBERS,
            _ => FILLER,
        };
        pool.choose(&mut self.rng).expect("pool")
    }

    /// Shuffles the rows, assigns ids and maps the truth onto the new order.
    fn finish(mut self) -> DemoSet {
        let n = self.rows.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut self.rng);
        let mut new_of = vec![0; n];
        for (new, &old) in order.iter().enumerate() {
            new_of[old] = new;
        }
        let lines = order
            .iter()
            .enumerate()
            .map(|(new, &old)| {
                let r = &self.rows[old];
                serde_json::json!({"id": format!("rev-{:06}", new + 1), "text": r.text, "label": LABELS[r.label]})
                    .to_string()
            })
            .collect();
        let t = &mut self.truth;
        let m = |i: &mut usize| *i = new_of[*i];
        t.exact_copies.iter_mut().for_each(|(a, b)| {
            m(a);
            m(b);
        });
        t.near_copies.iter_mut().for_each(|(a, b, _)| {
            m(a);
            m(b);
        });
        t.conflicts.iter_mut().for_each(|(a, b)| {
            m(a);
            m(b);
        });
        t.families.iter_mut().flatten().for_each(m);
        t.noisy.iter_mut().for_each(m);
        t.empty.iter_mut().for_each(m);
        t.outliers.iter_mut().for_each(m);
        t.labels = order.iter().map(|&o| self.rows[o].label).collect();
        t.true_labels = order.iter().map(|&o| self.rows[o].true_label).collect();
        DemoSet {
            lines,
            truth: self.truth,
        }
    }
}

const POSITIVE: &[&str] = &[
    "I really love this {product}.",
    "The {aspect} is {good} and works exactly as described.",
    "Absolutely {good} {aspect}, worth every penny.",
    "I would happily recommend it to my {person}.",
    "After {time} the {aspect} still feels {good}.",
    "Five stars, the {aspect} exceeded my expectations.",
    "Setup took {n} minutes and everything just worked.",
    "Great value, the {aspect} is {good} for the price.",
    "My {person} was impressed by how {good} it is.",
    "I am very happy with this purchase.",
];

const NEGATIVE: &[&str] = &[
    "The {aspect} stopped working after {time}.",
    "Really disappointed, the {aspect} is {bad}.",
    "I would not recommend this {product} to my {person}.",
    "It broke within {time} and support never answered.",
    "Waste of money, the {aspect} feels {bad}.",
    "One star, the {aspect} is nothing like the pictures.",
    "I returned it after {n} days because the {aspect} failed.",
    "Cheap materials and a {bad} {aspect}.",
    "My {person} laughed at how {bad} it is.",
    "Very unhappy with this purchase.",
];

const NEUTRAL: &[&str] = &[
    "I bought this {product} for my {person}.",
    "It arrived in {n} days, shipped from {place}.",
    "I have been using it for {time} now.",
    "The box contained the {product}, a manual and {n} spare parts.",
    "I mostly use it at {place} on weekends.",
    "This is my {n} order from this seller.",
    "The {aspect} is about what you would expect for a {product}.",
    "I compared it with two other models before ordering.",
];

const PRODUCTS: &[&str] = &[
    "kettle",
    "blender",
    "desk lamp",
    "backpack",
    "phone case",
    "coffee grinder",
    "headset",
    "keyboard",
    "water bottle",
    "router",
    "toaster",
    "tent",
    "charger",
    "monitor stand",
];
const ASPECTS: &[&str] = &[
    "battery",
    "build quality",
    "handle",
    "screen",
    "lid",
    "motor",
    "zipper",
    "cable",
    "sound",
    "finish",
    "button",
    "hinge",
    "fabric",
    "display",
    "switch",
];
const GOOD: &[&str] = &[
    "excellent",
    "solid",
    "sturdy",
    "reliable",
    "superb",
    "great",
    "fantastic",
    "smooth",
];
const BAD: &[&str] = &[
    "flimsy", "awful", "useless", "terrible", "poor", "broken", "noisy", "cheap",
];
const PEOPLE: &[&str] = &[
    "sister",
    "brother",
    "dad",
    "mom",
    "roommate",
    "colleague",
    "neighbour",
    "son",
];
const TIMES: &[&str] = &[
    "two days",
    "a week",
    "three weeks",
    "a month",
    "six months",
    "a year",
];
const PLACES: &[&str] = &[
    "Lisbon",
    "the office",
    "the cabin",
    "Ohio",
    "the garage",
    "Berlin",
    "the kitchen",
];
const NUMBERS: &[&str] = &["two", "three", "four", "five", "ten", "twelve"];
const FILLER: &[&str] = &[
    "really",
    "quite",
    "also",
    "honestly",
    "basically",
    "still",
    "again",
    "though",
    "maybe",
    "overall",
    "indeed",
    "somewhat",
    "clearly",
    "just",
    "actually",
    "perhaps",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_sized() {
        let a = generate(DemoConfig { base: 300, seed: 3 });
        let b = generate(DemoConfig { base: 300, seed: 3 });
        assert_eq!(a.lines, b.lines);
        assert!(a.lines.len() > 300 + 9 + 15);
        assert!(!a.truth.conflicts.is_empty());
        assert_ne!(a.lines, generate(DemoConfig { base: 300, seed: 4 }).lines);
    }
}
