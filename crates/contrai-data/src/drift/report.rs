//! The drift report: what changed between two versions and how each partition shifted, its
//! findings and verdict, and how it prints.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// What drifted between two versions.
#[derive(Debug, Clone, Serialize)]
pub struct DriftReport {
    /// One line: `no drift` or what moved.
    pub verdict: String,
    /// Whether anything shifted beyond the thresholds.
    pub drifted: bool,
    /// One line a shift found.
    pub findings: Vec<String>,
    /// The old version.
    pub old: String,
    /// The new version.
    pub new: String,
    /// Rows added, removed and changed.
    pub rows: RowChanges,
    /// New samples that are near-copies (not exact) of old ones.
    pub near_copies: NearCopies,
    /// The shifts of each compared partition (`all` for files; each partition of two splits,
    /// then `all`).
    pub partitions: Vec<PartitionShift>,
}

/// Rows added, removed and changed.
#[derive(Debug, Clone, Serialize)]
pub struct RowChanges {
    /// `id` (rows matched by their id field) or `content` (no ids: by normalised text).
    pub matched_by: &'static str,
    /// Samples of the old version.
    pub old: u64,
    /// Samples of the new version.
    pub new: u64,
    /// In the new version only.
    pub added: u64,
    /// In the old version only.
    pub removed: u64,
    /// The same id with another text or label (0 when matched by content).
    pub changed: u64,
    /// The same id, text and label (or the same text).
    pub unchanged: u64,
    /// A few ids of each kind.
    pub examples: BTreeMap<&'static str, Vec<String>>,
}

/// New samples that are near-duplicates of old ones without being exact copies.
#[derive(Debug, Clone, Serialize)]
pub struct NearCopies {
    /// How many.
    pub count: u64,
    /// Their share of the new samples that are not exact copies of old ones.
    pub share_of_new: f64,
    /// A few `new id ~ old id` pairs.
    pub examples: Vec<String>,
}

/// The shifts of one partition.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionShift {
    /// `train`, `val`, `holdout` or `all`.
    pub name: String,
    /// Samples in the old and the new version.
    pub samples: [u64; 2],
    /// The label distribution (none without labels).
    pub labels: Option<LabelShift>,
    /// Lengths in words.
    pub length: Option<LengthShift>,
    /// Word unigrams and bigrams.
    pub vocabulary: Option<VocabularyShift>,
}

/// Label distribution shift: Pearson's chi-square test of homogeneity.
#[derive(Debug, Clone, Serialize)]
pub struct LabelShift {
    /// Samples per label, old and new.
    pub counts: BTreeMap<String, [u64; 2]>,
    /// The test statistic.
    pub chi_square: f64,
    /// Its degrees of freedom.
    pub dof: usize,
    /// Its p-value.
    pub p_value: f64,
    /// The label whose share moved most, and its share old and new.
    pub largest_move: (String, f64, f64),
    /// Significant and large.
    pub shifted: bool,
}

/// Length shift: the two-sample Kolmogorov–Smirnov test on words per sample.
#[derive(Debug, Clone, Serialize)]
pub struct LengthShift {
    /// Median words, old and new.
    pub median_words: [f64; 2],
    /// The largest gap between the two distribution functions.
    pub ks_d: f64,
    /// Its p-value.
    pub p_value: f64,
    /// Significant and large.
    pub shifted: bool,
}

/// Vocabulary shift: the Jensen–Shannon divergence of the word unigram and bigram
/// distributions, against the divergence of random halves of the pooled texts.
#[derive(Debug, Clone, Serialize)]
pub struct VocabularyShift {
    /// Texts measured, old and new (at most [`VOCAB_SAMPLE`] each).
    pub texts: [u64; 2],
    /// The divergence, in bits (0: the same distribution, 1: disjoint).
    pub jsd: f64,
    /// The mean divergence of random re-splits of the pooled texts into groups of these sizes.
    pub null_jsd: f64,
    /// `jsd / null_jsd`.
    pub ratio: f64,
    /// The permutation p-value: the share of re-splits at least as divergent (plus one).
    pub p_value: f64,
    /// The n-grams that moved most, with their frequency per 10,000 n-grams old and new.
    pub moved: Vec<MovedGram>,
    /// Above [`VOCAB_RATIO`] times the null, and above every permutation.
    pub shifted: bool,
}

/// One n-gram's frequency in both versions.
#[derive(Debug, Clone, Serialize)]
pub struct MovedGram {
    /// The n-gram (normalised words).
    pub gram: String,
    /// Per 10,000 n-grams in the old version.
    pub old_per_10k: f64,
    /// Per 10,000 n-grams in the new version.
    pub new_per_10k: f64,
}

impl DriftReport {
    /// Fills the findings and the verdict.
    pub(super) fn judge(&mut self) {
        let mut f = Vec::new();
        for p in &self.partitions {
            if let Some(l) = p.labels.as_ref().filter(|l| l.shifted) {
                f.push(format!(
                    "{}: labels shifted (chi-square p = {:.1e}): `{}` {:.1} % → {:.1} %",
                    p.name,
                    l.p_value,
                    l.largest_move.0,
                    100.0 * l.largest_move.1,
                    100.0 * l.largest_move.2
                ));
            }
            if let Some(l) = p.length.as_ref().filter(|l| l.shifted) {
                f.push(format!(
                    "{}: lengths shifted (KS D = {:.2}, p = {:.1e}): median {} → {} words",
                    p.name, l.ks_d, l.p_value, l.median_words[0], l.median_words[1]
                ));
            }
            if let Some(v) = p.vocabulary.as_ref().filter(|v| v.shifted) {
                let top: Vec<String> = v
                    .moved
                    .iter()
                    .take(5)
                    .map(|g| {
                        let dir = if g.new_per_10k > g.old_per_10k { "+" } else { "-" };
                        format!("{dir}\"{}\"", g.gram)
                    })
                    .collect();
                f.push(format!(
                    "{}: vocabulary shifted (JSD {:.4} bits, {:.1}× random halves'): {}",
                    p.name,
                    v.jsd,
                    v.ratio,
                    top.join(" ")
                ));
            }
        }
        self.drifted = !f.is_empty();
        let r = &self.rows;
        self.verdict = if self.drifted {
            format!(
                "drift: {} shift(s) between {} and {} samples",
                f.len(),
                r.old,
                r.new
            )
        } else if r.added + r.removed + r.changed == 0 {
            format!("no drift: the versions hold the same {} samples", r.new)
        } else {
            format!(
                "no drift: {} added, {} removed, {} changed, with no shift of labels, lengths or vocabulary",
                r.added, r.removed, r.changed
            )
        };
        self.findings = f;
    }
}

impl fmt::Display for DriftReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.verdict)?;
        for x in &self.findings {
            writeln!(f, "  - {x}")?;
        }
        let r = &self.rows;
        writeln!(f, "\n{} → {}", self.old, self.new)?;
        writeln!(
            f,
            "rows (matched by {}): {} → {}; {} added, {} removed, {} changed, {} unchanged",
            r.matched_by, r.old, r.new, r.added, r.removed, r.changed, r.unchanged
        )?;
        for (kind, ids) in &r.examples {
            writeln!(f, "  {kind}: {}", ids.join(", "))?;
        }
        let c = &self.near_copies;
        writeln!(
            f,
            "near-copies of old samples among the new: {} ({:.1} % of the new texts){}",
            c.count,
            100.0 * c.share_of_new,
            if c.examples.is_empty() {
                String::new()
            } else {
                format!(", e.g. {}", c.examples.join("; "))
            }
        )?;
        for p in &self.partitions {
            writeln!(f, "\n{} ({} → {} samples)", p.name, p.samples[0], p.samples[1])?;
            if let Some(l) = &p.labels {
                let parts: Vec<String> = l
                    .counts
                    .iter()
                    .map(|(k, v)| format!("{k} {} → {}", v[0], v[1]))
                    .collect();
                writeln!(
                    f,
                    "  labels: {} (chi-square {:.1}, p = {:.2e})",
                    parts.join(", "),
                    l.chi_square,
                    l.p_value
                )?;
            }
            if let Some(l) = &p.length {
                writeln!(
                    f,
                    "  length: median {} → {} words (KS D = {:.3}, p = {:.2e})",
                    l.median_words[0], l.median_words[1], l.ks_d, l.p_value
                )?;
            }
            if let Some(v) = &p.vocabulary {
                writeln!(
                    f,
                    "  vocabulary: JSD {:.4} bits, random halves {:.4} ({:.1}×, p = {:.2})",
                    v.jsd, v.null_jsd, v.ratio, v.p_value
                )?;
                for g in v.moved.iter().take(6) {
                    writeln!(
                        f,
                        "    {:<30} {:>8.1} → {:>8.1} per 10k",
                        g.gram, g.old_per_10k, g.new_per_10k
                    )?;
                }
            }
        }
        Ok(())
    }
}
