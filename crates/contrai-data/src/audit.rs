//! The audit: duplicates, near-duplicates, label conflicts, empty texts, lengths and classes.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use contrai_stats::median;
use serde::Serialize;

use crate::error::Result;
use crate::index::{Clustering, Content, Index, IndexConfig, Skipped};
use crate::minhash::Banding;
use crate::near::EditRule;
use crate::progress::Progress;
use crate::read::{FieldSpec, Source};
use crate::store::StoreDir;
use crate::text::Shingling;

/// Texts with fewer words than this (but at least one) are near-empty.
const NEAR_EMPTY_WORDS: u32 = 3;
/// Robust z-score of log length beyond which a text is a length outlier.
const OUTLIER_Z: f64 = 3.5;
/// Examples kept of each kind of skipped row.
const EXAMPLES: usize = 10;

/// What the audit reads and how it compares texts.
#[derive(Debug, Clone, Default)]
pub struct AuditConfig {
    /// Near-duplicate parameters.
    pub index: IndexConfig,
    /// Which fields hold text, label and id.
    pub fields: FieldSpec,
    /// Skip and count malformed rows instead of stopping at the first.
    pub skip_bad: bool,
    /// Keep the texts' hashes in a persisted store (and reuse those already there).
    pub store: Option<StoreDir>,
}

/// An audited dataset: its index and verified clusters, from which reports and splits are made.
#[derive(Debug)]
pub struct Audit {
    /// The sources, in order.
    pub sources: Vec<Source>,
    /// The configuration used.
    pub config: AuditConfig,
    /// The per-sample index.
    pub index: Index,
    /// The clusters.
    pub clustering: Clustering,
}

impl Audit {
    /// Reads and clusters `sources` (two streaming passes over each).
    pub fn run(sources: Vec<Source>, config: AuditConfig, progress: &dyn Progress) -> Result<Audit> {
        let index = Index::build(
            &sources,
            &config.fields,
            &config.index,
            config.skip_bad,
            config.store.as_ref(),
            progress,
        )?;
        let clustering = index.cluster(&sources, &config.fields, &config.index, progress)?;
        Ok(Audit {
            sources,
            config,
            index,
            clustering,
        })
    }

    /// Label counts of a cluster's members, by label name.
    pub fn label_counts(&self, members: &[u32]) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for &m in members {
            if let Some(l) = self.index.samples[m as usize].label {
                *counts.entry(self.index.labels[l as usize].clone()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// The report: counts, every cluster, conflicts, and a verdict.
    pub fn report(&self) -> AuditReport {
        let samples = &self.index.samples;
        let c = &self.clustering;
        let multi: Vec<usize> = (0..c.clusters.len())
            .filter(|&i| c.clusters[i].len() > 1)
            .collect();
        let clusters: Vec<ClusterReport> = multi.iter().map(|&i| self.cluster_report(i)).collect();
        let mut sorted = clusters.clone();
        sorted.sort_by(|a, b| b.size.cmp(&a.size).then(a.index.cmp(&b.index)));
        let conflicts: Vec<ClusterReport> = sorted.iter().filter(|c| c.labels.len() > 1).cloned().collect();
        let near: Vec<&ClusterReport> = clusters.iter().filter(|c| c.distinct_texts > 1).collect();
        let (exact_groups, exact_samples) =
            count_groups(samples.iter().filter(|s| s.words > 0).map(|s| s.content));
        let (byte_groups, byte_samples) = count_groups(samples.iter().filter(|s| s.words > 0).map(|s| s.raw));
        let banding = self.config.index.banding();
        let mut report = AuditReport {
            verdict: String::new(),
            problems: Vec::new(),
            content: self.config.index.content,
            source: self
                .sources
                .iter()
                .map(Source::name)
                .collect::<Vec<_>>()
                .join(", "),
            rows: self.index.rows,
            samples: samples.len() as u64,
            bad_rows: Skips::of(&self.index.bad_rows),
            missing_text: Skips::of(&self.index.missing_text),
            missing_label: self.missing_labels(),
            params: Params {
                threshold: self.config.index.threshold,
                num_perm: self.config.index.num_perm,
                banding,
                recall_at_threshold: banding.candidate_probability(self.config.index.threshold),
                shingling: self.config.index.shingling,
                edits: self.config.index.edits,
                edit_banding: self.config.index.layout().edits.map(|(b, _)| b),
            },
            exact: ExactStats {
                groups: exact_groups,
                samples: exact_samples,
                redundant: exact_samples - exact_groups,
                byte_identical_groups: byte_groups,
                byte_identical_samples: byte_samples,
            },
            near: NearStats {
                clusters: near.len() as u64,
                samples: near.iter().map(|c| c.size).sum(),
                candidate_pairs: c.candidate_pairs,
                verified_pairs: c.verified_pairs.len() as u64,
            },
            duplicate_clusters: clusters.len() as u64,
            conflicts: ConflictStats {
                clusters: conflicts.len() as u64,
                samples: conflicts.iter().map(|c| c.size).sum(),
                list: conflicts,
            },
            empty: self.empties(),
            length: self.lengths(),
            classes: self.classes(),
            clusters: sorted,
            store: (!self.index.stores.is_empty()).then(|| StoreUse {
                files: self.index.stores.clone(),
                reused: self.index.reused,
                hashed: self.index.hashed,
                note: self.index.store_note.clone(),
            }),
        };
        report.judge();
        report
    }

    fn cluster_report(&self, i: usize) -> ClusterReport {
        let members = &self.clustering.clusters[i];
        let rep = &self.index.samples[members[0] as usize];
        let labels = self.label_counts(members);
        let (majority, majority_count) = labels
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map_or((None, 0), |(l, n)| (Some(l.clone()), *n));
        let labelled: u64 = labels.values().sum();
        ClusterReport {
            index: i as u64,
            representative: rep.id.clone(),
            size: members.len() as u64,
            distinct_texts: self.clustering.distinct[i] as u64,
            kind: if self.clustering.distinct[i] > 1 {
                "near"
            } else {
                "exact"
            },
            majority,
            majority_fraction: if labelled > 0 {
                majority_count as f64 / labelled as f64
            } else {
                1.0
            },
            labels,
            ids: members
                .iter()
                .map(|&m| self.index.samples[m as usize].id.clone())
                .collect(),
            snippet: rep.snippet.clone(),
        }
    }

    fn missing_labels(&self) -> Vec<String> {
        if self.index.labels.is_empty() {
            return Vec::new();
        }
        self.index
            .samples
            .iter()
            .filter(|s| s.label.is_none())
            .map(|s| s.id.clone())
            .collect()
    }

    fn empties(&self) -> EmptyStats {
        let ids = |pred: &dyn Fn(u32) -> bool| -> Vec<String> {
            self.index
                .samples
                .iter()
                .filter(|s| pred(s.words))
                .map(|s| s.id.clone())
                .collect()
        };
        let text = self.config.index.content == Content::Text;
        EmptyStats {
            empty: ids(&|w| w == 0),
            near_empty: ids(&|w| text && w > 0 && w < NEAR_EMPTY_WORDS),
        }
    }

    fn lengths(&self) -> LengthStats {
        if self.config.index.content != Content::Text {
            return LengthStats::default();
        }
        let mut words: Vec<u32> = self
            .index
            .samples
            .iter()
            .map(|s| s.words)
            .filter(|&w| w > 0)
            .collect();
        words.sort_unstable();
        if words.is_empty() {
            return LengthStats::default();
        }
        let logs: Vec<f64> = words.iter().map(|&w| (w as f64).ln()).collect();
        let med = median(&logs).unwrap_or(0.0);
        let mad = contrai_stats::mad(&logs, med);
        let mut outliers: Vec<Outlier> = if mad > 0.0 {
            self.index
                .samples
                .iter()
                .filter(|s| s.words > 0 && (0.6745 * ((s.words as f64).ln() - med) / mad).abs() > OUTLIER_Z)
                .map(|s| Outlier {
                    id: s.id.clone(),
                    words: s.words,
                })
                .collect()
        } else {
            Vec::new()
        };
        outliers.sort_by_key(|o| std::cmp::Reverse(o.words));
        LengthStats {
            min_words: words[0],
            median_words: words[words.len() / 2],
            max_words: words[words.len() - 1],
            outliers,
        }
    }

    fn classes(&self) -> Vec<ClassCount> {
        let mut counts = vec![0u64; self.index.labels.len()];
        for s in &self.index.samples {
            if let Some(l) = s.label {
                counts[l as usize] += 1;
            }
        }
        let total = self.index.samples.len().max(1) as f64;
        let mut out: Vec<ClassCount> = self
            .index
            .labels
            .iter()
            .zip(counts)
            .map(|(l, n)| ClassCount {
                label: l.clone(),
                count: n,
                fraction: n as f64 / total,
            })
            .collect();
        out.sort_by(|a, b| b.count.cmp(&a.count).then(a.label.cmp(&b.label)));
        out
    }
}

/// Groups with more than one member: (groups, samples in them).
fn count_groups(keys: impl Iterator<Item = u128>) -> (u64, u64) {
    let mut counts: HashMap<u128, u64> = HashMap::new();
    for k in keys {
        *counts.entry(k).or_insert(0) += 1;
    }
    counts
        .values()
        .filter(|&&n| n > 1)
        .fold((0, 0), |(g, s), &n| (g + 1, s + n))
}

/// The audit's findings, ready to print or serialise.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// One line: `clean` or what needs attention.
    pub verdict: String,
    /// One line a problem found.
    pub problems: Vec<String>,
    /// What the text field holds (numeric features: duplicates are equal vectors, no text checks).
    pub content: Content,
    /// The data read.
    pub source: String,
    /// Rows read.
    pub rows: u64,
    /// Samples indexed (rows with text).
    pub samples: u64,
    /// Malformed rows skipped with `--skip-bad`.
    pub bad_rows: Skips,
    /// Rows with no text value.
    pub missing_text: Skips,
    /// Ids of samples without a label, when other samples have one.
    pub missing_label: Vec<String>,
    /// Parameters of the near-duplicate search.
    pub params: Params,
    /// Identical normalised texts.
    pub exact: ExactStats,
    /// Clusters joining different texts.
    pub near: NearStats,
    /// Clusters with more than one sample, exact or near.
    pub duplicate_clusters: u64,
    /// Clusters whose members disagree on the label.
    pub conflicts: ConflictStats,
    /// Empty and near-empty texts.
    pub empty: EmptyStats,
    /// Length in words.
    pub length: LengthStats,
    /// Samples per label.
    pub classes: Vec<ClassCount>,
    /// Every cluster with more than one sample, largest first.
    pub clusters: Vec<ClusterReport>,
    /// The persisted index, when one was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreUse>,
}

/// How the persisted index served an audit.
#[derive(Debug, Clone, Serialize)]
pub struct StoreUse {
    /// Its files.
    pub files: Vec<String>,
    /// Texts whose hashes it held.
    pub reused: u64,
    /// Texts hashed (and added to it).
    pub hashed: u64,
    /// Why it could not be written, if it could not.
    pub note: Option<String>,
}

/// Skipped rows: how many and a few examples.
#[derive(Debug, Clone, Serialize)]
pub struct Skips {
    /// How many.
    pub count: u64,
    /// The first few.
    pub examples: Vec<Skipped>,
}

impl Skips {
    fn of(all: &[Skipped]) -> Skips {
        Skips {
            count: all.len() as u64,
            examples: all.iter().take(EXAMPLES).cloned().collect(),
        }
    }
}

/// Near-duplicate parameters as used.
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// Verified Jaccard threshold.
    pub threshold: f64,
    /// MinHash functions.
    pub num_perm: usize,
    /// LSH bands and rows.
    pub banding: Banding,
    /// Probability that a pair right at the threshold becomes a candidate.
    pub recall_at_threshold: f64,
    /// Shingles.
    pub shingling: Shingling,
    /// Rule 1: texts a few words apart are near-copies too.
    pub edits: Option<EditRule>,
    /// Rule 1's LSH bands for texts long enough for several edits (shorter ones are found by
    /// exact keys).
    pub edit_banding: Option<Banding>,
}

/// Exact duplicates.
#[derive(Debug, Clone, Serialize)]
pub struct ExactStats {
    /// Groups of identical normalised text.
    pub groups: u64,
    /// Samples in those groups.
    pub samples: u64,
    /// Samples beyond the first of each group.
    pub redundant: u64,
    /// Of those, groups identical byte for byte.
    pub byte_identical_groups: u64,
    /// Samples in byte-identical groups.
    pub byte_identical_samples: u64,
}

/// Near duplicates.
#[derive(Debug, Clone, Serialize)]
pub struct NearStats {
    /// Clusters holding at least two different texts.
    pub clusters: u64,
    /// Samples in them.
    pub samples: u64,
    /// Pairs proposed by LSH.
    pub candidate_pairs: u64,
    /// Pairs whose exact Jaccard reached the threshold.
    pub verified_pairs: u64,
}

/// Label conflicts.
#[derive(Debug, Clone, Serialize)]
pub struct ConflictStats {
    /// Conflicting clusters.
    pub clusters: u64,
    /// Samples in them.
    pub samples: u64,
    /// Each conflicting cluster.
    pub list: Vec<ClusterReport>,
}

/// Empty texts.
#[derive(Debug, Clone, Serialize)]
pub struct EmptyStats {
    /// Ids of texts with no word.
    pub empty: Vec<String>,
    /// Ids of texts with one or two words.
    pub near_empty: Vec<String>,
}

/// Text lengths in words.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LengthStats {
    /// Shortest non-empty text.
    pub min_words: u32,
    /// Median.
    pub median_words: u32,
    /// Longest.
    pub max_words: u32,
    /// Texts whose log length lies beyond a robust z of 3.5.
    pub outliers: Vec<Outlier>,
}

/// A length outlier.
#[derive(Debug, Clone, Serialize)]
pub struct Outlier {
    /// Its id.
    pub id: String,
    /// Its words.
    pub words: u32,
}

/// One label's share.
#[derive(Debug, Clone, Serialize)]
pub struct ClassCount {
    /// The label.
    pub label: String,
    /// Samples.
    pub count: u64,
    /// Share of all samples.
    pub fraction: f64,
}

/// One cluster of duplicates.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    /// Its number (clusters are numbered by representative id).
    pub index: u64,
    /// The member with the smallest id.
    pub representative: String,
    /// Members.
    pub size: u64,
    /// Different normalised texts among them.
    pub distinct_texts: u64,
    /// `exact` (one text) or `near`.
    pub kind: &'static str,
    /// Members per label.
    pub labels: BTreeMap<String, u64>,
    /// The most frequent label.
    pub majority: Option<String>,
    /// Its share of the labelled members.
    pub majority_fraction: f64,
    /// Member ids, smallest first.
    pub ids: Vec<String>,
    /// The representative's first words.
    pub snippet: String,
}

impl AuditReport {
    /// Fills the verdict and the problem list from the counts.
    fn judge(&mut self) {
        let mut p = Vec::new();
        if self.exact.groups > 0 {
            p.push(format!(
                "{} exact-duplicate groups cover {} samples ({} byte-identical groups, {} samples); {} copies are redundant",
                self.exact.groups,
                self.exact.samples,
                self.exact.byte_identical_groups,
                self.exact.byte_identical_samples,
                self.exact.redundant
            ));
        }
        if self.near.clusters > 0 {
            p.push(format!(
                "{} near-copy clusters cover {} samples",
                self.near.clusters, self.near.samples
            ));
        }
        if self.conflicts.clusters > 0 {
            p.push(format!(
                "{} duplicate clusters carry conflicting labels ({} samples)",
                self.conflicts.clusters, self.conflicts.samples
            ));
        }
        let (e, ne) = (self.empty.empty.len(), self.empty.near_empty.len());
        if e + ne > 0 {
            p.push(match self.content {
                Content::Text => {
                    format!("{e} empty and {ne} near-empty texts (under {NEAR_EMPTY_WORDS} words)")
                }
                Content::Numeric => format!("{e} samples with no feature value"),
            });
        }
        if self.missing_text.count > 0 {
            p.push(format!("{} rows have no text value", self.missing_text.count));
        }
        if !self.missing_label.is_empty() {
            p.push(format!("{} samples have no label", self.missing_label.len()));
        }
        if self.bad_rows.count > 0 {
            p.push(format!("{} malformed rows were skipped", self.bad_rows.count));
        }
        if !self.length.outliers.is_empty() {
            p.push(format!("{} length outliers", self.length.outliers.len()));
        }
        if self.samples < 1000 {
            p.push(format!(
                "only {} samples: under ~1,000 representative samples fine-tuning rarely generalises",
                self.samples
            ));
        }
        self.verdict = if p.is_empty() {
            format!(
                "clean: {} samples, no duplicates, conflicts or empty texts",
                self.samples
            )
        } else {
            format!(
                "needs attention: {} problem(s) in {} samples",
                p.len(),
                self.samples
            )
        };
        self.problems = p;
    }
}

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.verdict)?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        writeln!(
            f,
            "\n{} rows, {} samples from {}",
            self.rows, self.samples, self.source
        )?;
        let b = self.params.banding;
        if self.content == Content::Numeric {
            writeln!(
                f,
                "duplicates: equal feature vectors (numeric features: no near-duplicate search)"
            )?;
        } else {
            writeln!(
                f,
                "near-copies: shingles' Jaccard ≥ {} (MinHash {} × LSH {} bands × {} rows, P(find) = {:.3} at J = {}), {}; {} candidate pairs, {} verified",
                self.params.threshold,
                self.params.num_perm,
                b.bands,
                b.rows,
                self.params.recall_at_threshold,
                self.params.threshold,
                EditRule::describe(self.params.edits.as_ref()),
                self.near.candidate_pairs,
                self.near.verified_pairs
            )?;
        }
        if let Some(s) = &self.store {
            writeln!(
                f,
                "index: {} texts reused, {} hashed ({}){}",
                s.reused,
                s.hashed,
                s.files.join(", "),
                s.note.as_deref().map(|n| format!("; {n}")).unwrap_or_default()
            )?;
        }
        if !self.classes.is_empty() {
            let parts: Vec<String> = self
                .classes
                .iter()
                .map(|c| format!("{} {} ({:.1}%)", c.label, c.count, 100.0 * c.fraction))
                .collect();
            writeln!(f, "classes: {}", parts.join(", "))?;
        }
        let l = &self.length;
        if self.content == Content::Text {
            writeln!(
                f,
                "length (words): min {}, median {}, max {}",
                l.min_words, l.median_words, l.max_words
            )?;
        }
        write_clusters(f, "label conflicts", &self.conflicts.list)?;
        write_clusters(f, "largest duplicate clusters", &self.clusters)?;
        for (what, skips) in [
            ("malformed rows", &self.bad_rows),
            ("rows without text", &self.missing_text),
        ] {
            for s in &skips.examples {
                writeln!(f, "{what}: {} {}", s.at, s.reason)?;
            }
        }
        Ok(())
    }
}

/// Prints the first clusters of a list with ids and a snippet.
fn write_clusters(f: &mut fmt::Formatter<'_>, title: &str, list: &[ClusterReport]) -> fmt::Result {
    const SHOWN: usize = 10;
    if list.is_empty() {
        return Ok(());
    }
    writeln!(f, "\n{title} ({}):", list.len())?;
    for c in list.iter().take(SHOWN) {
        let mut ids: Vec<&str> = c.ids.iter().take(6).map(String::as_str).collect();
        if c.ids.len() > 6 {
            ids.push("…");
        }
        let labels: Vec<String> = c.labels.iter().map(|(l, n)| format!("{l}×{n}")).collect();
        writeln!(
            f,
            "  {:>4} × {:<5} [{}] {}",
            c.size,
            c.kind,
            labels.join(" "),
            ids.join(", ")
        )?;
        writeln!(f, "         \"{}\"", c.snippet)?;
    }
    if list.len() > SHOWN {
        writeln!(f, "  … {} more (all in --json)", list.len() - SHOWN)?;
    }
    Ok(())
}
