//! Two versions of a dataset compared: rows added, removed and changed, near-copies across the
//! versions, and per partition the shift of labels, lengths and vocabulary, with a verdict.
//!
//! Each shift is judged by a test and by its size: at corpus scale every difference is
//! significant, so a shift counts only when it is both unlikely under "same distribution" and
//! large enough to matter (the thresholds below).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::audit::{Audit, AuditConfig};
use crate::error::{DataError, Result};
use crate::index::{Index, for_each_chunk};
use crate::progress::Progress;
use crate::read::{Format, Source};
use crate::split::{Manifest, PARTITIONS};
use crate::text::normalize;

mod report;
pub use report::{
    DriftReport, LabelShift, LengthShift, MovedGram, NearCopies, PartitionShift, RowChanges, VocabularyShift,
};

/// A p-value under which a difference is not chance.
const P_SIGNIFICANT: f64 = 1e-3;
/// Labels: the smallest change of a label's share (in points of 1) that counts as a shift.
const LABEL_SHARE_MOVE: f64 = 0.02;
/// Lengths: the smallest Kolmogorov–Smirnov distance that counts as a shift.
const LENGTH_KS_D: f64 = 0.1;
/// Vocabulary: how many times the divergence of random halves of the pooled texts the
/// observed one must be (and above every permutation) to count as a shift.
const VOCAB_RATIO: f64 = 2.0;
/// Permutations drawn for the vocabulary's null divergence.
const PERMUTATIONS: usize = 19;
/// Texts a side's vocabulary is measured on, at most (chosen by content hash).
const VOCAB_SAMPLE: usize = 5000;
/// Words of each text counted, at most.
const VOCAB_WORDS: usize = 1000;
/// N-grams in fewer texts than this (both versions together) are counted as one "rare" n-gram:
/// their counts are mostly sampling noise, which would drown the divergence of the others.
const MIN_TEXTS: u32 = 5;
/// N-grams listed as those that moved most.
const TOP_GRAMS: usize = 12;
/// Ids listed for each kind of row change.
const EXAMPLES: usize = 5;

/// One version: a data file, or a split directory whose partitions are compared one by one.
#[derive(Debug, Clone)]
pub enum Version {
    /// A file (all its rows one partition, `all`).
    File(Source),
    /// A split: its manifest checked against its files.
    Split {
        /// The directory.
        dir: PathBuf,
        /// Its manifest.
        manifest: Box<Manifest>,
    },
}

impl Version {
    /// A split directory (it holds `manifest.json`) or a data file.
    pub fn open(path: &Path, format: Option<Format>) -> Result<Version> {
        let m = path.join("manifest.json");
        if m.is_file() {
            let (manifest, _) = Manifest::read(&m)?;
            manifest.verify_files(path, &m)?;
            return Ok(Version::Split {
                dir: path.to_path_buf(),
                manifest: Box::new(manifest),
            });
        }
        Ok(Version::File(Source::file(path, format)?))
    }

    /// The path or name shown.
    pub fn name(&self) -> String {
        match self {
            Version::File(s) => s.name(),
            Version::Split { dir, .. } => dir.display().to_string(),
        }
    }

    /// Its partitions, named.
    fn parts(&self) -> Vec<(&'static str, Source)> {
        match self {
            Version::File(s) => vec![("all", s.clone())],
            Version::Split { dir, manifest } => manifest
                .partition_sources(dir)
                .into_iter()
                .map(|(p, source)| (PARTITIONS[p as usize], source))
                .collect(),
        }
    }
}

/// How two versions are read and compared.
#[derive(Debug, Clone, Default)]
pub struct DriftConfig {
    /// Fields and near-duplicate parameters.
    pub audit: AuditConfig,
}

/// Compares two versions of a dataset.
pub fn drift(
    old: &Version,
    new: &Version,
    cfg: &DriftConfig,
    progress: &dyn Progress,
) -> Result<DriftReport> {
    let (old_parts, new_parts) = (old.parts(), new.parts());
    same_schema(old, &old_parts, new, &new_parts)?;
    let sources: Vec<Source> = old_parts
        .iter()
        .chain(&new_parts)
        .map(|(_, s)| s.clone())
        .collect();
    let audit = Audit::run(sources.clone(), cfg.audit.clone(), progress)?;
    let n_old = old_parts.len() as u8;
    let is_new = |source: u8| source >= n_old;
    let rows = row_changes(&audit.index, &is_new);
    let near_copies = near_copies(&audit, &is_new);
    // Partitions compared pairwise when both are splits; always all rows together.
    let mut groups: Vec<(String, Vec<u8>, Vec<u8>)> = Vec::new();
    if matches!((old, new), (Version::Split { .. }, Version::Split { .. })) {
        for name in PARTITIONS {
            let o: Vec<u8> = (0..n_old).filter(|&i| old_parts[i as usize].0 == name).collect();
            let n: Vec<u8> = (0..new_parts.len() as u8)
                .filter(|&i| new_parts[i as usize].0 == name)
                .map(|i| i + n_old)
                .collect();
            if !o.is_empty() && !n.is_empty() {
                groups.push((name.into(), o, n));
            }
        }
    }
    groups.push((
        "all".into(),
        (0..n_old).collect(),
        (n_old..sources.len() as u8).collect(),
    ));
    let grams = Grams::read(&audit, &sources, cfg, progress)?;
    let partitions = groups
        .into_iter()
        .map(|(name, o, n)| partition_shift(name, &audit.index, &grams, &o, &n))
        .collect();
    let mut report = DriftReport {
        verdict: String::new(),
        drifted: false,
        findings: Vec::new(),
        old: old.name(),
        new: new.name(),
        rows,
        near_copies,
        partitions,
    };
    report.judge();
    Ok(report)
}

/// Two versions must hold the same fields (every partition of a split has its own file).
fn same_schema(old: &Version, o: &[(&str, Source)], new: &Version, n: &[(&str, Source)]) -> Result<()> {
    let names = |parts: &[(&str, Source)]| -> Result<HashSet<String>> {
        Ok(match parts.first() {
            Some((_, s)) => s.field_names()?.into_iter().collect(),
            None => HashSet::new(),
        })
    };
    let (a, b) = (names(o)?, names(n)?);
    if a == b {
        return Ok(());
    }
    let list = |s: &HashSet<String>, t: &HashSet<String>| {
        let mut v: Vec<&str> = s.difference(t).map(String::as_str).collect();
        v.sort_unstable();
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    Err(DataError::Schema {
        old: old.name(),
        new: new.name(),
        what: format!(
            "fields only in the old version: {}; only in the new: {}",
            list(&a, &b),
            list(&b, &a)
        ),
    })
}

/// Rows matched by id when the rows have ids, else by content.
fn row_changes(index: &Index, is_new: &dyn Fn(u8) -> bool) -> RowChanges {
    let samples = &index.samples;
    let numbered = samples.iter().all(|s| s.id == s.line.to_string());
    let key = |s: &crate::index::Sample| -> String {
        if numbered {
            crate::text::hash_hex(s.content)
        } else {
            s.id.clone()
        }
    };
    let side = |new: bool| -> HashMap<String, (u128, Option<u32>, &str)> {
        samples
            .iter()
            .filter(|s| is_new(s.source) == new)
            .map(|s| (key(s), (s.content, s.label, s.id.as_str())))
            .collect()
    };
    let (old, new) = (side(false), side(true));
    let mut examples: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut push = |kind: &'static str, id: &str| {
        let list = examples.entry(kind).or_default();
        if list.len() < EXAMPLES {
            list.push(id.to_string());
        }
    };
    let (mut added, mut changed, mut unchanged) = (0, 0, 0);
    let mut keys: Vec<&String> = new.keys().collect();
    keys.sort_unstable();
    for k in keys {
        let (content, label, id) = new[k];
        match old.get(k) {
            None => {
                added += 1;
                push("added", id);
            }
            Some(&(c, l, _)) if (c, l) != (content, label) => {
                changed += 1;
                push("changed", id);
            }
            Some(_) => unchanged += 1,
        }
    }
    let mut gone: Vec<(&String, &str)> = old
        .iter()
        .filter(|(k, _)| !new.contains_key(*k))
        .map(|(k, v)| (k, v.2))
        .collect();
    gone.sort_unstable();
    for (_, id) in &gone {
        push("removed", id);
    }
    RowChanges {
        matched_by: if numbered { "content" } else { "id" },
        old: old.len() as u64,
        new: new.len() as u64,
        added,
        removed: gone.len() as u64,
        changed,
        unchanged,
        examples,
    }
}

/// New samples in a cluster with an old sample, whose text no old sample has exactly.
fn near_copies(audit: &Audit, is_new: &dyn Fn(u8) -> bool) -> NearCopies {
    let samples = &audit.index.samples;
    let old_texts: HashSet<u128> = samples
        .iter()
        .filter(|s| !is_new(s.source))
        .map(|s| s.content)
        .collect();
    let fresh = samples
        .iter()
        .filter(|s| is_new(s.source) && !old_texts.contains(&s.content))
        .count();
    let (mut count, mut examples) = (0u64, Vec::new());
    for members in &audit.clustering.clusters {
        let Some(&first_old) = members.iter().find(|&&m| !is_new(samples[m as usize].source)) else {
            continue;
        };
        for &m in members {
            let s = &samples[m as usize];
            if is_new(s.source) && !old_texts.contains(&s.content) {
                count += 1;
                if examples.len() < EXAMPLES {
                    examples.push(format!("{} ~ {}", s.id, samples[first_old as usize].id));
                }
            }
        }
    }
    NearCopies {
        count,
        share_of_new: if fresh > 0 {
            count as f64 / fresh as f64
        } else {
            0.0
        },
        examples,
    }
}

/// The word unigrams and bigrams of a sample of each source's texts, interned.
struct Grams {
    names: Vec<String>,
    /// For each source, its sampled texts' n-gram ids.
    texts: Vec<Vec<Vec<u32>>>,
}

impl Grams {
    /// Reads every source once more, keeping at most [`VOCAB_SAMPLE`] texts of each (those
    /// whose content hash falls lowest: the same texts on every run).
    fn read(audit: &Audit, sources: &[Source], cfg: &DriftConfig, progress: &dyn Progress) -> Result<Grams> {
        let samples = &audit.index.samples;
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut names = Vec::new();
        let mut texts = Vec::new();
        let mut next = 0usize;
        for (tag, source) in sources.iter().enumerate() {
            let mut hashes: Vec<u64> = samples
                .iter()
                .filter(|s| s.source as usize == tag)
                .map(|s| s.content as u64)
                .collect();
            hashes.sort_unstable();
            let cut = hashes.get(VOCAB_SAMPLE).copied().unwrap_or(u64::MAX);
            let mut mine = Vec::new();
            progress.stage(
                &format!("counting words of {}", source.name()),
                source.progress_total(),
            );
            let mut scratch = Index::default();
            for_each_chunk(
                source,
                &cfg.audit.fields,
                true,
                &mut scratch,
                progress,
                |chunk, _| {
                    for rec in chunk {
                        let s = &samples[next];
                        next += 1;
                        if (s.content as u64) >= cut {
                            continue;
                        }
                        let norm = normalize(rec.text.as_deref().unwrap_or_default());
                        let words: Vec<&str> = norm
                            .split(' ')
                            .filter(|w| !w.is_empty())
                            .take(VOCAB_WORDS)
                            .collect();
                        let grams = words
                            .iter()
                            .map(|w| w.to_string())
                            .chain(words.windows(2).map(|w| format!("{} {}", w[0], w[1])));
                        mine.push(
                            grams
                                .map(|g| {
                                    let n = ids.len() as u32;
                                    *ids.entry(g).or_insert_with_key(|g| {
                                        names.push(g.clone());
                                        n
                                    })
                                })
                                .collect(),
                        );
                    }
                },
            )?;
            progress.finish();
            texts.push(mine);
        }
        Ok(Grams { names, texts })
    }
}

fn partition_shift(name: String, index: &Index, grams: &Grams, old: &[u8], new: &[u8]) -> PartitionShift {
    let of = |tags: &[u8]| -> Vec<&crate::index::Sample> {
        index
            .samples
            .iter()
            .filter(|s| tags.contains(&s.source))
            .collect()
    };
    let (o, n) = (of(old), of(new));
    let texts =
        |tags: &[u8]| -> Vec<&Vec<u32>> { tags.iter().flat_map(|&t| &grams.texts[t as usize]).collect() };
    PartitionShift {
        name,
        samples: [o.len() as u64, n.len() as u64],
        labels: label_shift(index, &o, &n),
        length: length_shift(&o, &n),
        vocabulary: vocabulary_shift(grams, &texts(old), &texts(new)),
    }
}

fn label_shift(
    index: &Index,
    o: &[&crate::index::Sample],
    n: &[&crate::index::Sample],
) -> Option<LabelShift> {
    let count = |side: &[&crate::index::Sample]| {
        let mut c = vec![0u64; index.labels.len()];
        for s in side {
            if let Some(l) = s.label {
                c[l as usize] += 1;
            }
        }
        c
    };
    let (a, b) = (count(o), count(n));
    let (chi_square, dof, p_value) = contrai_stats::chi_square_homogeneity(&a, &b)?;
    let (ta, tb) = (a.iter().sum::<u64>() as f64, b.iter().sum::<u64>() as f64);
    let (largest, sa, sb) = (0..a.len())
        .map(|l| (l, a[l] as f64 / ta, b[l] as f64 / tb))
        .max_by(|x, y| (x.1 - x.2).abs().total_cmp(&(y.1 - y.2).abs()))?;
    Some(LabelShift {
        counts: (0..a.len())
            .map(|l| (index.labels[l].clone(), [a[l], b[l]]))
            .collect(),
        chi_square,
        dof,
        p_value,
        largest_move: (index.labels[largest].clone(), sa, sb),
        shifted: p_value < P_SIGNIFICANT && (sa - sb).abs() >= LABEL_SHARE_MOVE,
    })
}

fn length_shift(o: &[&crate::index::Sample], n: &[&crate::index::Sample]) -> Option<LengthShift> {
    let words =
        |side: &[&crate::index::Sample]| -> Vec<f64> { side.iter().map(|s| s.words as f64).collect() };
    let (mut a, mut b) = (words(o), words(n));
    let (ks_d, p_value) = contrai_stats::ks_two_sample(&mut a, &mut b)?;
    Some(LengthShift {
        median_words: [a[a.len() / 2], b[b.len() / 2]],
        ks_d,
        p_value,
        shifted: p_value < P_SIGNIFICANT && ks_d >= LENGTH_KS_D,
    })
}

/// The Jensen–Shannon divergence (bits) of two count vectors over the same n-grams.
fn jsd(a: &[u32], b: &[u32], ta: f64, tb: f64) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| contribution(x as f64 / ta, y as f64 / tb))
        .sum()
}

/// One n-gram's term of the Jensen–Shannon divergence.
fn contribution(p: f64, q: f64) -> f64 {
    let m = (p + q) / 2.0;
    let term = |x: f64| if x > 0.0 { 0.5 * x * (x / m).log2() } else { 0.0 };
    term(p) + term(q)
}

/// Counts of each n-gram over `texts`, n-grams mapped through `bucket`; and the total.
fn counts(texts: &[&Vec<u32>], bucket: &[u32], len: usize) -> (Vec<u32>, f64) {
    let mut c = vec![0u32; len];
    let mut total = 0.0;
    for t in texts {
        for &g in t.iter() {
            c[bucket[g as usize] as usize] += 1;
        }
        total += t.len() as f64;
    }
    (c, total)
}

/// Each n-gram's own slot when it is in at least [`MIN_TEXTS`] of `texts`, else the shared
/// rare slot (the last): (the map, the number of slots).
fn buckets(texts: &[&Vec<u32>], vocab: usize) -> (Vec<u32>, usize) {
    let mut df = vec![0u32; vocab];
    let mut seen = vec![usize::MAX; vocab];
    for (i, t) in texts.iter().enumerate() {
        for &g in t.iter() {
            if seen[g as usize] != i {
                seen[g as usize] = i;
                df[g as usize] += 1;
            }
        }
    }
    let rare = vocab as u32;
    let map = (0..vocab)
        .map(|g| if df[g] >= MIN_TEXTS { g as u32 } else { rare })
        .collect();
    (map, vocab + 1)
}

fn vocabulary_shift(grams: &Grams, o: &[&Vec<u32>], n: &[&Vec<u32>]) -> Option<VocabularyShift> {
    let mut pooled: Vec<&Vec<u32>> = o.iter().chain(n).copied().collect();
    let (bucket, vocab) = buckets(&pooled, grams.names.len());
    let (a, ta) = counts(o, &bucket, vocab);
    let (b, tb) = counts(n, &bucket, vocab);
    if ta == 0.0 || tb == 0.0 {
        return None;
    }
    let observed = jsd(&a, &b, ta, tb);
    // The null: the pooled texts re-split at random into groups of the same sizes.
    let mut rng = ChaCha8Rng::seed_from_u64(0xd1f7);
    let nulls: Vec<f64> = (0..PERMUTATIONS)
        .map(|_| {
            pooled.shuffle(&mut rng);
            let (x, tx) = counts(&pooled[..o.len()], &bucket, vocab);
            let (y, ty) = counts(&pooled[o.len()..], &bucket, vocab);
            if tx == 0.0 || ty == 0.0 {
                0.0
            } else {
                jsd(&x, &y, tx, ty)
            }
        })
        .collect();
    let null_jsd = nulls.iter().sum::<f64>() / nulls.len() as f64;
    let above = nulls.iter().filter(|&&x| x >= observed).count();
    let ratio = if null_jsd > 0.0 {
        observed / null_jsd
    } else if observed > 0.0 {
        f64::INFINITY
    } else {
        1.0
    };
    let mut moved: Vec<(f64, usize)> = (0..vocab - 1)
        .map(|g| (contribution(a[g] as f64 / ta, b[g] as f64 / tb), g))
        .filter(|(c, _)| *c > 0.0)
        .collect();
    moved.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    Some(VocabularyShift {
        texts: [o.len() as u64, n.len() as u64],
        jsd: observed,
        null_jsd,
        ratio,
        p_value: (1 + above) as f64 / (1 + PERMUTATIONS) as f64,
        moved: moved
            .into_iter()
            .take(TOP_GRAMS)
            .map(|(_, g)| MovedGram {
                gram: grams.names[g].clone(),
                old_per_10k: 1e4 * a[g] as f64 / ta,
                new_per_10k: 1e4 * b[g] as f64 / tb,
            })
            .collect(),
        shifted: above == 0 && ratio >= VOCAB_RATIO,
    })
}
