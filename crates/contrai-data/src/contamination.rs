//! Decontamination: the training samples that share a long word n-gram (13 words by default, as
//! lm-evaluation-harness's decontamination does) or a near-duplicate MinHash signature with any
//! sample of an evaluation set — a benchmark, or the user's own test data.
//!
//! The evaluation sets are small and held in memory (their n-grams, band keys and shingles);
//! the training data streams past them once, in parallel chunks.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use crate::error::{DataError, Result};
use crate::index::{Index, IndexConfig, Signer, for_each_chunk};
use crate::near::Fingerprint;
use crate::progress::Progress;
use crate::read::{FieldSpec, Source};
use crate::text::{normalize, word_count, word_grams};

/// Words of the n-grams compared by default.
pub const NGRAM: usize = 13;
/// Evaluation texts shorter than the n-gram but with at least this many words are matched as a
/// whole (an n-gram of their own length); shorter ones only as near-duplicates.
const SHORT_MIN_WORDS: usize = 8;

/// An evaluation set to check against: a file, and the field holding its text.
#[derive(Debug, Clone)]
pub struct EvalSet {
    /// The file.
    pub source: Source,
    /// Its text field.
    pub text: String,
}

impl EvalSet {
    /// `FILE` or `FILE:FIELD` (the text field, `default_text` when not given); the format from
    /// the extension, which must tell it.
    pub fn parse(arg: &str, default_text: &str) -> Result<EvalSet> {
        let (path, text) = match arg.rsplit_once(':') {
            Some((p, f)) if !f.is_empty() && !f.contains(['/', '\\']) && !Path::new(arg).exists() => (p, f),
            _ => (arg, default_text),
        };
        let source = Source::file(PathBuf::from(path), None).map_err(|e| match e {
            DataError::UnknownFormat { path, ext } => DataError::Param(format!(
                "{}: cannot tell the format of an evaluation set from {}; name it .jsonl, .csv, .tsv or .parquet",
                path.display(),
                if ext.is_empty() { "a name without an extension".into() } else { format!("`.{ext}`") }
            )),
            other => other,
        })?;
        Ok(EvalSet {
            source,
            text: text.into(),
        })
    }
}

/// How training samples are matched with evaluation samples.
#[derive(Debug, Clone)]
pub struct ContaminationConfig {
    /// Words a shared n-gram has.
    pub ngram: usize,
    /// Near-duplicate parameters (the audit's).
    pub index: IndexConfig,
}

impl Default for ContaminationConfig {
    fn default() -> Self {
        ContaminationConfig {
            ngram: NGRAM,
            index: IndexConfig::default(),
        }
    }
}

/// How a training sample matched an evaluation sample.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    /// A shared run of words (the words).
    Ngram(String),
    /// A near-copy ([`crate::near`]), with the exact Jaccard similarity of their shingles.
    Near(f64),
}

/// One contaminated training sample.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    /// Its position among the training samples read (rows with a text).
    pub sample: u64,
    /// Its id.
    pub id: String,
    /// The evaluation set it matched (its file).
    pub against: String,
    /// The evaluation sample's id.
    pub eval_id: String,
    /// How.
    pub evidence: Evidence,
}

/// What one evaluation set found.
#[derive(Debug, Clone, Serialize)]
pub struct PerSet {
    /// The file.
    pub file: String,
    /// Its text field.
    pub text: String,
    /// Its samples.
    pub samples: u64,
    /// Training samples matched by an n-gram.
    pub by_ngram: u64,
    /// Training samples matched only as near-duplicates.
    pub by_near: u64,
}

/// The training data checked against the evaluation sets.
#[derive(Debug, Clone, Serialize)]
pub struct Contamination {
    /// Words of the n-grams compared.
    pub ngram: usize,
    /// Training samples read.
    pub samples: u64,
    /// Training samples contaminated (by any set).
    pub contaminated: u64,
    /// Each evaluation set.
    pub sets: Vec<PerSet>,
    /// The contaminated samples, in reading order.
    pub hits: Vec<Hit>,
    /// Positions of every contaminated sample, in reading order (a split drops them).
    #[serde(skip)]
    pub positions: Vec<u64>,
}

/// One evaluation sample, as the checks need it.
struct EvalSample {
    set: u16,
    id: String,
    fingerprint: Fingerprint,
}

/// The evaluation sets in memory.
struct EvalIndex {
    samples: Vec<EvalSample>,
    /// N-gram hash → the first evaluation sample holding it; and the lengths of short texts
    /// matched whole.
    grams: HashMap<u64, u32>,
    short_lengths: Vec<usize>,
    /// (group of the key's slot, key) → evaluation samples.
    bands: HashMap<(u16, u64), Vec<u32>>,
    /// The group of each key slot ([`crate::minhash::KeyLayout::group_of_slots`]).
    group_of: Vec<usize>,
}

impl EvalIndex {
    fn build(sets: &[EvalSet], cfg: &ContaminationConfig, signer: &Signer) -> Result<EvalIndex> {
        let mut index = EvalIndex {
            samples: Vec::new(),
            grams: HashMap::new(),
            short_lengths: Vec::new(),
            bands: HashMap::new(),
            group_of: signer.layout().group_of_slots(),
        };
        for (set, e) in sets.iter().enumerate() {
            let fields = FieldSpec {
                text: e.text.clone(),
                label: None,
                id: Some("id".into()),
                explicit: false,
            };
            for rec in e.source.records(&fields)? {
                let rec = rec?;
                let norm = normalize(rec.text.as_deref().unwrap_or_default());
                let words = word_count(&norm);
                if words == 0 {
                    continue;
                }
                let at = index.samples.len() as u32;
                let n = if words >= cfg.ngram { cfg.ngram } else { words };
                if words >= cfg.ngram || words >= SHORT_MIN_WORDS {
                    for (h, _) in word_grams(&norm, n) {
                        index.grams.entry(h).or_insert(at);
                    }
                    if n < cfg.ngram && !index.short_lengths.contains(&n) {
                        index.short_lengths.push(n);
                    }
                }
                let signed = signer.sign_normalized(&norm);
                for (slot, key) in signed.keys.into_iter().enumerate().filter(|(_, k)| *k != 0) {
                    let group = index.group_of[slot] as u16;
                    index.bands.entry((group, key)).or_default().push(at);
                }
                index.samples.push(EvalSample {
                    set: set as u16,
                    id: rec.id,
                    fingerprint: signed.fingerprint.settled(),
                });
            }
        }
        Ok(index)
    }

    /// The first evaluation sample a training text matches, and how; `keys`: its band keys when
    /// the audit already computed them (else it is signed here). Its fingerprint is made only
    /// when a key meets an evaluation sample's.
    fn check(
        &self,
        norm: &str,
        cfg: &ContaminationConfig,
        signer: &Signer,
        keys: Option<Vec<u64>>,
    ) -> Option<(u32, Evidence)> {
        for n in std::iter::once(cfg.ngram).chain(self.short_lengths.iter().copied()) {
            for (h, range) in word_grams(norm, n) {
                if let Some(&at) = self.grams.get(&h) {
                    return Some((at, Evidence::Ngram(norm[range].to_string())));
                }
            }
        }
        if word_count(norm) == 0 {
            return None;
        }
        let keys = keys.unwrap_or_else(|| signer.sign_normalized(norm).keys);
        let near = cfg.index.near_copy();
        let mut fingerprint = None;
        let mut best: Option<(u32, f64)> = None;
        for (slot, key) in keys.iter().enumerate().filter(|(_, k)| **k != 0) {
            let group = self.group_of[slot] as u16;
            for &at in self.bands.get(&(group, *key)).into_iter().flatten() {
                let mine = fingerprint.get_or_insert_with(|| Fingerprint::of(norm, &cfg.index.shingling));
                let Some(m) = near.judge(mine, &self.samples[at as usize].fingerprint) else {
                    continue;
                };
                if best.is_none_or(|(_, b)| m.jaccard() > b) {
                    best = Some((at, m.jaccard()));
                }
            }
        }
        best.map(|(at, j)| (at, Evidence::Near(j)))
    }
}

/// Checks every training sample of `train` against the evaluation sets. `audited`: an index
/// built over `train` as its first source with `cfg.index` (the audit's), whose band keys are
/// then taken instead of signing every text again.
pub fn check(
    train: &Source,
    fields: &FieldSpec,
    sets: &[EvalSet],
    cfg: &ContaminationConfig,
    audited: Option<&Index>,
    progress: &dyn Progress,
) -> Result<Contamination> {
    if cfg.ngram == 0 {
        return Err(DataError::Param("the n-gram must have at least one word".into()));
    }
    cfg.index.validate()?;
    let signer = Signer::new(&cfg.index);
    let eval = EvalIndex::build(sets, cfg, &signer)?;
    let mut per: Vec<PerSet> = sets
        .iter()
        .enumerate()
        .map(|(i, s)| PerSet {
            file: s.source.name(),
            text: s.text.clone(),
            samples: eval.samples.iter().filter(|e| e.set as usize == i).count() as u64,
            by_ngram: 0,
            by_near: 0,
        })
        .collect();
    let (mut hits, mut positions, mut next) = (Vec::new(), Vec::new(), 0u64);
    progress.stage(
        &format!("checking {} against {} set(s)", train.name(), sets.len()),
        train.progress_total(),
    );
    let mut scratch = Index::default();
    for_each_chunk(train, fields, true, &mut scratch, progress, |chunk, _| {
        let first = next as usize;
        let found: Vec<(String, Option<(u32, Evidence)>)> = chunk
            .into_par_iter()
            .enumerate()
            .map(|(k, rec)| {
                let norm = normalize(rec.text.as_deref().unwrap_or_default());
                let keys = audited.and_then(|ix| ix.candidate_keys(first + k));
                (rec.id, eval.check(&norm, cfg, &signer, keys))
            })
            .collect();
        for (id, hit) in found {
            if let Some((at, evidence)) = hit {
                let e = &eval.samples[at as usize];
                let set = &mut per[e.set as usize];
                match evidence {
                    Evidence::Ngram(_) => set.by_ngram += 1,
                    Evidence::Near(_) => set.by_near += 1,
                }
                positions.push(next);
                hits.push(Hit {
                    sample: next,
                    id,
                    against: set.file.clone(),
                    eval_id: e.id.clone(),
                    evidence,
                });
            }
            next += 1;
        }
    })?;
    progress.finish();
    Ok(Contamination {
        ngram: cfg.ngram,
        samples: next,
        contaminated: positions.len() as u64,
        sets: per,
        hits,
        positions,
    })
}

impl fmt::Display for Contamination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "\ncontamination ({}-grams or near-duplicates): {} of {} training samples",
            self.ngram, self.contaminated, self.samples
        )?;
        for s in &self.sets {
            writeln!(
                f,
                "  {} (`{}`, {} samples): {} by a shared {}-gram, {} as near-duplicates",
                s.file, s.text, s.samples, s.by_ngram, self.ngram, s.by_near
            )?;
        }
        for h in self.hits.iter().take(10) {
            let how = match &h.evidence {
                Evidence::Ngram(words) => format!("\"{}\"", words.chars().take(80).collect::<String>()),
                Evidence::Near(j) => format!("near-duplicate, Jaccard {j:.2}"),
            };
            writeln!(f, "  {} ~ {} {}: {how}", h.id, h.against, h.eval_id)?;
        }
        if self.contaminated > 10 {
            writeln!(f, "  … {} more (--json lists them all)", self.contaminated - 10)?;
        }
        Ok(())
    }
}
