//! The parent of a split version: its manifest checked against its files, the partition each of
//! its samples holds, and the parameters a new version must share with it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_128;

use crate::error::{DataError, Result};
use crate::near::EditRule;
use crate::read::Source;
use crate::split::{Manifest, SplitConfig};
use crate::text::hash_hex;

/// A split directory's manifest, or the manifest file given.
fn manifest_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("manifest.json")
    } else {
        path.to_path_buf()
    }
}

/// The settings a new version of the split at `path` (its directory or manifest) starts from:
/// the parent's own. Only the manifest is read; the split checks the parent's files.
pub fn settings(path: &Path) -> Result<SplitConfig> {
    Ok(Manifest::read(&manifest_path(path))?.0.params.config())
}

/// What a version records of its parent (`manifest.json`'s `parent`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ParentRecord {
    /// The parent's manifest, as given.
    pub manifest: String,
    /// xxh3-128 of the parent manifest's bytes.
    pub manifest_xxh3: String,
    /// The parent's version.
    pub version: u32,
    /// The parent's samples found again, in the partition they held, for train, val, holdout.
    pub kept: [u64; 3],
    /// The parent's samples not in this version, for train, val, holdout.
    pub lost: [u64; 3],
    /// New samples, for train, val, holdout.
    pub added: [u64; 3],
    /// New samples placed where a near-copy of a parent's sample sits rather than by their hash.
    pub pulled: u64,
    /// New samples dropped because they are near-copies of parent samples in two partitions.
    pub bridges: u64,
}

/// An earlier split, verified against its files.
#[derive(Debug)]
pub struct Parent {
    /// Its manifest file.
    pub path: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// xxh3-128 of the manifest's bytes.
    pub digest: u128,
    /// The partition (0..3) of each of its content hashes.
    pub partition: HashMap<u128, u8>,
}

impl Parent {
    /// Reads a split directory (or its `manifest.json`) and checks every partition file against
    /// the manifest's checksum: a version is only built on the data its parent really holds.
    pub fn open(path: &Path) -> Result<Parent> {
        let path = manifest_path(path);
        let (manifest, bytes) = Manifest::read(&path)?;
        manifest.verify_files(path.parent().unwrap_or(Path::new(".")), &path)?;
        let mut partition = HashMap::new();
        for (p, info) in manifest.partitions.iter().enumerate().take(3) {
            for h in &info.content_hashes {
                let hash = u128::from_str_radix(h, 16).map_err(|_| DataError::Manifest {
                    path: path.clone(),
                    message: format!("{} content hash `{h}` is not 32 hex digits", info.name),
                })?;
                partition.insert(hash, p as u8);
            }
        }
        Ok(Parent {
            digest: xxh3_128(&bytes),
            path,
            manifest,
            partition,
        })
    }

    /// The parent's partition files, read as anchors (their near-copies stay with them), with
    /// the partition each holds.
    pub fn anchors(&self) -> Vec<(u8, Source)> {
        self.manifest
            .partition_sources(self.path.parent().unwrap_or(Path::new(".")))
    }

    /// A version keeps its parent's placement and what "the same sample" meant: the same
    /// ratios, seed, policies, fields and near-duplicate parameters.
    pub fn check(&self, cfg: &SplitConfig) -> Result<()> {
        let p = &self.manifest.params;
        let mine = cfg.manifest_params();
        let differ = |what: &str, old: String, new: String| -> Result<()> {
            if old == new {
                return Ok(());
            }
            Err(DataError::Manifest {
                path: self.path.clone(),
                message: format!(
                    "the parent split used {what} {old}, this version {new}: a version keeps its parent's \
                     parameters (give {old}, or split anew without --from)"
                ),
            })
        };
        differ("ratios", format!("{:?}", p.ratios), format!("{:?}", mine.ratios))?;
        differ("seed", p.seed.to_string(), mine.seed.to_string())?;
        differ(
            "on_conflict",
            p.on_conflict.to_string(),
            mine.on_conflict.to_string(),
        )?;
        differ("dedup", p.dedup.to_string(), mine.dedup.to_string())?;
        differ(
            "threshold",
            p.index.threshold.to_string(),
            mine.index.threshold.to_string(),
        )?;
        differ(
            "num_perm",
            p.index.num_perm.to_string(),
            mine.index.num_perm.to_string(),
        )?;
        differ(
            "near-copy rule",
            EditRule::describe(p.index.edits.as_ref()),
            EditRule::describe(mine.index.edits.as_ref()),
        )?;
        differ(
            "content",
            format!("{:?}", p.index.content),
            format!("{:?}", mine.index.content),
        )?;
        for role in ["text", "label", "id"] {
            differ(
                &format!("{role} field"),
                p.fields[role].to_string(),
                mine.fields[role].to_string(),
            )?;
        }
        Ok(())
    }

    /// The record of this parent in a version whose partitions hold `now` (content hashes
    /// per partition); `pulled` and `bridges` as the placement counted them.
    pub fn record(&self, now: &[Vec<u128>; 3], pulled: u64, bridges: u64) -> ParentRecord {
        let mut kept = [0u64; 3];
        let mut lost = [0u64; 3];
        let mut added = [0u64; 3];
        for (p, hashes) in now.iter().enumerate() {
            for h in hashes {
                match self.partition.get(h) {
                    Some(&q) if q as usize == p => kept[p] += 1,
                    _ => added[p] += 1,
                }
            }
        }
        for (p, info) in self.manifest.partitions.iter().enumerate().take(3) {
            lost[p] = info.count.saturating_sub(kept[p]);
        }
        ParentRecord {
            manifest: self.path.display().to_string(),
            manifest_xxh3: hash_hex(self.digest),
            version: self.manifest.version,
            kept,
            lost,
            added,
            pulled,
            bridges,
        }
    }
}
