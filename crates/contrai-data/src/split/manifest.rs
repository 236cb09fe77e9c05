//! `manifest.json`: the record a split leaves of what it split, how, and what each partition
//! holds, with the guard's check over the files as written.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_128;

use super::{Dedup, OnConflict, SplitConfig};
use crate::audit::AuditConfig;
use crate::error::{DataError, Result};
use crate::parent::ParentRecord;
use crate::read::{Format, Source};
use crate::text::hash_hex;

/// `manifest.json`: what was split, how, and what each partition holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// Layout version.
    pub manifest_version: u32,
    /// The split's version: 1 for a fresh split, its parent's + 1.
    #[serde(default = "first_version")]
    pub version: u32,
    /// The split this one is a new version of.
    #[serde(default)]
    pub parent: Option<ParentRecord>,
    /// The tool and its version.
    pub tool: String,
    /// The input.
    pub source: String,
    /// xxh3-128 of the input file's bytes (none for data held in memory): a run resumed on a
    /// changed file is told.
    #[serde(default)]
    pub source_xxh3: Option<String>,
    /// Its format (the partitions are written in it).
    pub format: Format,
    /// Every parameter.
    pub params: ManifestParams,
    /// The partitions, in the order train, val, holdout.
    pub partitions: Vec<PartitionInfo>,
    /// Samples left out, by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Ids dropped for label conflicts.
    pub dropped_conflict_ids: Vec<String>,
    /// New rows dropped because they conflict with a locked sample of the parent (a near-copy,
    /// or the same text, with another label).
    #[serde(default)]
    pub locked_conflicts: Vec<LockedConflict>,
    /// The evaluation sets the data was checked against (samples matching one are dropped).
    #[serde(default)]
    pub contamination: Option<ContaminationRecord>,
    /// The post-write guard's result.
    pub guard: Guard,
}

fn first_version() -> u32 {
    1
}

/// Share of the rows read that a split may leave out before it says so loudly.
pub const LOUD_DROP_SHARE: f64 = 0.05;

impl Manifest {
    /// Reads a manifest file; also its bytes (a version records their checksum).
    pub fn read(path: &Path) -> Result<(Manifest, Vec<u8>)> {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let m = serde_json::from_slice(&bytes).map_err(|e| DataError::Manifest {
            path: path.to_path_buf(),
            message: format!("not a Contrai split manifest: {e}"),
        })?;
        Ok((m, bytes))
    }

    /// Each non-empty partition's file in `dir` (the manifest's folder) as a source, with its
    /// partition (0..3): read as written, in the split's format under its header row.
    pub fn partition_sources(&self, dir: &Path) -> Vec<(u8, Source)> {
        self.partitions
            .iter()
            .take(3)
            .enumerate()
            .filter(|(_, info)| info.count > 0)
            .map(|(p, info)| (p as u8, Source::of_format(dir.join(&info.file), self.format)))
            .collect()
    }

    /// Checks every partition file in `dir` against the manifest's xxh3-128, naming the first
    /// that is missing or changed since the split (`manifest` names the manifest in errors).
    pub fn verify_files(&self, dir: &Path, manifest: &Path) -> Result<()> {
        for p in self.partitions.iter().filter(|p| p.count > 0) {
            let bad = |message: String| DataError::Manifest {
                path: manifest.to_path_buf(),
                message,
            };
            if Path::new(&p.file).file_name().and_then(|n| n.to_str()) != Some(p.file.as_str()) {
                return Err(bad(format!(
                    "partition file `{}` is not a plain file name",
                    p.file
                )));
            }
            let file = dir.join(&p.file);
            let bytes = std::fs::read(&file).map_err(|e| DataError::io(&file, e))?;
            let sum = hash_hex(xxh3_128(&bytes));
            if sum != p.file_xxh3 {
                return Err(bad(format!(
                    "{}: xxh3-128 {sum} differs from the manifest's {} for the {} partition: the file changed after the split",
                    file.display(),
                    p.file_xxh3,
                    p.name
                )));
            }
        }
        Ok(())
    }

    /// A warning when the split left out more than [`LOUD_DROP_SHARE`] of the rows it read,
    /// with how many for each reason and the setting that decides it.
    pub fn heavy_drop(&self) -> Option<String> {
        let kept: u64 = self.partitions.iter().map(|p| p.count).sum();
        let left: u64 = self.dropped.values().sum();
        let read = kept + left;
        if read == 0 || (left as f64) <= LOUD_DROP_SHARE * read as f64 {
            return None;
        }
        let p = &self.params;
        let why = |reason: &str| match reason {
            "conflict" => format!(
                "in duplicate clusters whose labels disagree (on_label_conflict = {})",
                p.on_conflict
            ),
            "duplicate" => format!("duplicates of a sample kept (dedup = {})", p.dedup),
            "empty" => "empty".into(),
            "missing_text" => "without a text value".into(),
            "bad_rows" => "malformed".into(),
            "bridge" => "new near-copies of the parent's samples in two partitions".into(),
            "locked" => "new rows whose label conflicts with a locked sample of the parent".into(),
            "contaminated" => "sharing text with an evaluation set (--against)".into(),
            other => other.into(),
        };
        let reasons: Vec<String> = self
            .dropped
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{n} {}", why(r)))
            .collect();
        Some(format!(
            "the split leaves out {left} of the {read} samples read ({:.0} %): {}. Check the duplicate clusters \
             (`contrai data audit`) before training on what is left",
            100.0 * left as f64 / read as f64,
            reasons.join("; ")
        ))
    }
}

/// A new row that conflicts with a locked sample of the parent, and was dropped for it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LockedConflict {
    /// The new row's id.
    pub id: String,
    /// Its label.
    pub label: String,
    /// A parent sample of its cluster, and that sample's partition.
    pub parent_id: String,
    /// The partition the parent's samples hold.
    pub partition: String,
}

/// What a split records of its decontamination.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContaminationRecord {
    /// Words of the n-grams compared.
    pub ngram: usize,
    /// Each evaluation set.
    pub sets: Vec<EvalSetRecord>,
}

/// One evaluation set a split was checked against.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalSetRecord {
    /// Its file.
    pub file: String,
    /// xxh3-128 of its bytes.
    pub file_xxh3: String,
    /// Its text field.
    pub text: String,
    /// Its samples.
    pub samples: u64,
    /// Samples of the data that matched it (by an n-gram, or as near-duplicates).
    pub matched: u64,
}

/// The parameters recorded in the manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ManifestParams {
    /// Shares of train, val, holdout.
    pub ratios: [f64; 3],
    /// Placement seed.
    pub seed: u64,
    /// Conflict policy.
    pub on_conflict: OnConflict,
    /// Duplicate policy.
    pub dedup: Dedup,
    /// Text, label and id fields.
    pub fields: serde_json::Value,
    /// Near-duplicate parameters.
    pub index: crate::index::IndexConfig,
    /// LSH bands × rows.
    pub banding: crate::minhash::Banding,
}

impl ManifestParams {
    /// The split configuration these parameters record (a new version starts from its parent's).
    pub fn config(&self) -> SplitConfig {
        let field = |role: &str| self.fields[role].as_str().map(str::to_string);
        SplitConfig {
            ratios: self.ratios,
            seed: self.seed,
            on_conflict: self.on_conflict,
            dedup: self.dedup,
            audit: AuditConfig {
                index: self.index,
                fields: crate::FieldSpec {
                    text: field("text").unwrap_or_else(|| "text".into()),
                    label: field("label"),
                    id: field("id"),
                    explicit: self.fields["explicit"].as_bool().unwrap_or(false),
                },
                skip_bad: false,
                store: None,
            },
            ..SplitConfig::default()
        }
    }
}

/// One partition of the split.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionInfo {
    /// `train`, `val` or `holdout`.
    pub name: String,
    /// Its file, relative to the manifest.
    pub file: String,
    /// Samples.
    pub count: u64,
    /// xxh3-128 of the file's bytes.
    pub file_xxh3: String,
    /// Sorted content hashes (xxh3-128 of the normalised text) of its samples.
    pub content_hashes: Vec<String>,
}

/// The guard's check over the files as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Guard {
    /// Content hashes found in more than one partition.
    pub shared_content_hashes: u64,
    /// Verified near-duplicate pairs across partitions.
    pub cross_partition_near_pairs: u64,
    /// Both are zero.
    pub passed: bool,
}
