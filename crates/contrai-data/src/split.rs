//! The leakage-proof split: whole duplicate clusters placed by a seeded hash, versions that keep
//! their parent's samples where they were, atomic output in the input's format, and a guard that
//! re-reads what was written.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

use crate::audit::{Audit, AuditConfig, AuditReport};
use crate::commit::{Existing, Staging};
use crate::contamination::{self, Contamination, ContaminationConfig, EvalSet};
use crate::error::{DataError, Result};
use crate::index::for_each_chunk;
use crate::parent::{Parent, ParentRecord};
use crate::progress::Progress;
use crate::read::{Format, Source};
use crate::text::hash_hex;
use crate::write::{AtomicFile, RowWriter, write_atomic};

/// The three partitions, in order.
pub const PARTITIONS: [&str; 3] = ["train", "val", "holdout"];
/// Version of the manifest's layout.
pub const MANIFEST_VERSION: u32 = 1;

pub use contrai_base::data_choices::{Dedup, OnConflict};

mod manifest;
pub use manifest::{
    ContaminationRecord, EvalSetRecord, Guard, LOUD_DROP_SHARE, LockedConflict, Manifest, ManifestParams,
    PartitionInfo,
};

/// How to split.
#[derive(Debug, Clone)]
pub struct SplitConfig {
    /// Shares of train, val and holdout; they must sum to 1.
    pub ratios: [f64; 3],
    /// Seed of the placement hash.
    pub seed: u64,
    /// Label-conflict policy.
    pub on_conflict: OnConflict,
    /// Duplicate policy.
    pub dedup: Dedup,
    /// Reading and near-duplicate parameters.
    pub audit: AuditConfig,
    /// The split this one is a new version of (its directory or manifest): every sample of it
    /// keeps its partition, and new near-copies of them follow them or are dropped.
    pub parent: Option<PathBuf>,
    /// A version may hold fewer of its parent's holdout samples (they left the data, or match an
    /// evaluation set); without it, that is an error. A new row never takes a sample out: it is
    /// the one dropped when it conflicts with one.
    pub allow_shrink: bool,
    /// Evaluation sets: samples sharing a long n-gram or a near-duplicate with any are dropped.
    pub against: Vec<EvalSet>,
    /// Words of the n-grams compared with the evaluation sets.
    pub ngram: usize,
    /// What happens to a split already at the output.
    pub existing: Existing,
}

impl Default for SplitConfig {
    fn default() -> Self {
        SplitConfig {
            ratios: [0.85, 0.10, 0.05],
            seed: 42,
            on_conflict: OnConflict::Drop,
            dedup: Dedup::Exact,
            audit: AuditConfig::default(),
            parent: None,
            allow_shrink: false,
            against: Vec::new(),
            ngram: crate::contamination::NGRAM,
            existing: Existing::Refuse,
        }
    }
}

impl SplitConfig {
    fn validate(&self) -> Result<()> {
        let sum: f64 = self.ratios.iter().sum();
        if self.ratios.iter().any(|r| !(0.0..=1.0).contains(r)) || (sum - 1.0).abs() > 1e-6 {
            return Err(DataError::Param(format!(
                "ratios {:?} must each lie in [0, 1] and sum to 1 (they sum to {sum})",
                self.ratios
            )));
        }
        Ok(())
    }

    /// The parameters as a manifest records them.
    pub fn manifest_params(&self) -> ManifestParams {
        ManifestParams {
            ratios: self.ratios,
            seed: self.seed,
            on_conflict: self.on_conflict,
            dedup: self.dedup,
            fields: serde_json::to_value(&self.audit.fields).unwrap_or_default(),
            index: self.audit.index,
            banding: self.audit.index.banding(),
        }
    }
}

/// The result of a split.
#[derive(Debug)]
pub struct SplitOutcome {
    /// The manifest as written.
    pub manifest: Manifest,
    /// The audit of the input.
    pub report: AuditReport,
    /// What an interrupted earlier split into `out` left, and what became of it.
    pub leftovers: Vec<String>,
}

/// Why a sample is not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drop {
    Conflict,
    Duplicate,
    Empty,
    /// A new near-copy of parent samples in two partitions: wherever it went, it would leak.
    Bridge,
    /// It shares a long n-gram or a near-duplicate with an evaluation set.
    Contaminated,
    /// A new row whose label the parent's samples of its cluster do not carry: the parent's
    /// samples are locked, so the new row is the one dropped.
    Locked,
}

/// Splits `source` into `out/{train,val,holdout}.<ext>` and `out/manifest.json`.
pub fn split(source: Source, out: &Path, cfg: &SplitConfig, progress: &dyn Progress) -> Result<SplitOutcome> {
    cfg.validate()?;
    let parent = cfg.parent.as_deref().map(Parent::open).transpose()?;
    if let Some(p) = &parent {
        p.check(cfg)?;
    }
    let source_xxh3 = source.file_digest()?.map(hash_hex);
    let mut staging = Staging::open(out, cfg.existing)?;
    let anchors = parent.as_ref().map(Parent::anchors).unwrap_or_default();
    let mut sources = vec![source.clone()];
    sources.extend(anchors.iter().map(|(_, s)| s.clone()));
    let audit = Audit::run(sources, cfg.audit.clone(), progress)?;
    let anchor_partition: Vec<u8> = anchors.iter().map(|(p, _)| *p).collect();
    let contamination = decontaminate(&source, cfg, &audit.index, progress)?;
    let tainted: HashSet<u64> = contamination
        .iter()
        .flat_map(|(c, _)| c.positions.iter().copied())
        .collect();
    let plan = Plan::new(&audit, cfg, parent.as_ref(), &anchor_partition, &tainted);
    let hashes = plan.hashes(&audit);
    let lineage = parent
        .as_ref()
        .map(|p| p.record(&hashes, plan.pulled, plan.bridges));
    if let (Some(p), Some(l)) = (&parent, &lineage)
        && l.lost[2] > 0
        && !cfg.allow_shrink
    {
        return Err(shrinks(p, l, &audit, &hashes[2], &anchor_partition));
    }
    let files = write_partitions(&source, staging.path(), &audit, &plan, cfg, progress)?;
    let guard = guard(&files, &source, &cfg.audit, progress)?;
    let manifest = Manifest {
        version: parent.as_ref().map_or(1, |p| p.manifest.version + 1),
        parent: lineage,
        source_xxh3,
        contamination: contamination.map(|(_, record)| record),
        ..plan.manifest(&audit, cfg, &files, guard, hashes, &source)
    };
    for f in files.into_iter().flatten() {
        f.file.commit()?;
    }
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| DataError::Param(e.to_string()))?;
    write_atomic(staging.path().join("manifest.json"), &json)?;
    let leftovers = std::mem::take(&mut staging.notes);
    staging.commit()?;
    Ok(SplitOutcome {
        manifest,
        report: audit.report(),
        leftovers,
    })
}

/// The data checked against the evaluation sets, when there are any: the matches, and what the
/// manifest records of them.
fn decontaminate(
    source: &Source,
    cfg: &SplitConfig,
    audited: &crate::index::Index,
    progress: &dyn Progress,
) -> Result<Option<(Contamination, ContaminationRecord)>> {
    if cfg.against.is_empty() {
        return Ok(None);
    }
    let check_cfg = ContaminationConfig {
        ngram: cfg.ngram,
        index: cfg.audit.index,
    };
    let found = contamination::check(
        source,
        &cfg.audit.fields,
        &cfg.against,
        &check_cfg,
        Some(audited),
        progress,
    )?;
    let sets = cfg
        .against
        .iter()
        .zip(&found.sets)
        .map(|(e, s)| {
            Ok(EvalSetRecord {
                file: s.file.clone(),
                file_xxh3: e.source.file_digest()?.map(hash_hex).unwrap_or_default(),
                text: s.text.clone(),
                samples: s.samples,
                matched: s.by_ngram + s.by_near,
            })
        })
        .collect::<Result<_>>()?;
    let record = ContaminationRecord {
        ngram: cfg.ngram,
        sets,
    };
    Ok(Some((found, record)))
}

/// The error of a version whose holdout lost some of its parent's samples, with their ids.
fn shrinks(
    parent: &Parent,
    lineage: &ParentRecord,
    audit: &Audit,
    holdout: &[u128],
    anchors: &[u8],
) -> DataError {
    let now: HashSet<u128> = holdout.iter().copied().collect();
    let ids: Vec<&str> = audit
        .index
        .samples
        .iter()
        .filter(|s| s.source != 0 && anchors[s.source as usize - 1] == 2 && !now.contains(&s.content))
        .map(|s| s.id.as_str())
        .take(5)
        .collect();
    DataError::HoldoutShrinks {
        path: parent.path.clone(),
        lost: lineage.lost[2],
        parent: parent.manifest.partitions[2].count,
        examples: ids.join(", "),
    }
}

/// Where each input sample goes.
struct Plan {
    /// Partition (0..3) or reason dropped, for each sample of the input (source 0).
    fate: Vec<std::result::Result<u8, Drop>>,
    /// New samples placed with the parent's near-copies rather than by their hash.
    pulled: u64,
    /// New samples dropped as near-copies of the parent's samples in two partitions.
    bridges: u64,
    /// New rows dropped for a conflict with a locked sample: (row, a parent sample, partition).
    locked: Vec<(u32, u32, u8)>,
}

/// How an input row stands to the parent: its own row (same id and text), another row with a
/// parent sample's text, or new. Parent rows come first, so deduplication keeps their ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Standing {
    ParentRow,
    ParentText,
    New,
}

impl Plan {
    /// Places every cluster: with the parent's samples it holds (a version moves none of them,
    /// and a new row that conflicts with them is the one dropped), else by its hash. `anchors`
    /// gives the partition of each anchor source (sources 1..).
    fn new(
        audit: &Audit,
        cfg: &SplitConfig,
        parent: Option<&Parent>,
        anchors: &[u8],
        tainted: &HashSet<u64>,
    ) -> Plan {
        let samples = &audit.index.samples;
        let inputs = samples.iter().filter(|s| s.source == 0).count();
        let mut plan = Plan {
            fate: vec![Err(Drop::Empty); inputs],
            pulled: 0,
            bridges: 0,
            locked: Vec::new(),
        };
        // The parent's partition of a sample: an anchor's file, or the parent's content hashes.
        let old = |m: u32| -> Option<u8> {
            let s = &samples[m as usize];
            match s.source {
                0 => parent?.partition.get(&s.content).copied(),
                a => Some(anchors[a as usize - 1]),
            }
        };
        let parent_rows: HashSet<(&str, u128)> = samples
            .iter()
            .filter(|s| s.source != 0)
            .map(|s| (s.id.as_str(), s.content))
            .collect();
        let standing = |m: u32| {
            let s = &samples[m as usize];
            if parent_rows.contains(&(s.id.as_str(), s.content)) {
                Standing::ParentRow
            } else if old(m).is_some() {
                Standing::ParentText
            } else {
                Standing::New
            }
        };
        for members in &audit.clustering.clusters {
            let olds: BTreeSet<u8> = members.iter().filter_map(|&m| old(m)).collect();
            let key = members
                .iter()
                .map(|&m| samples[m as usize].content)
                .min()
                .unwrap_or(0);
            let placed = place(cfg.seed, key, &cfg.ratios);
            let mut inputs: Vec<u32> = members
                .iter()
                .copied()
                .filter(|&m| samples[m as usize].source == 0)
                .collect();
            // The labels the parent's samples carry (its files, and its rows as they are now).
            let anchored: Vec<u32> = members
                .iter()
                .copied()
                .filter(|&m| samples[m as usize].source != 0)
                .collect();
            let locked: Option<BTreeSet<u32>> = (!olds.is_empty()).then(|| {
                anchored
                    .iter()
                    .chain(inputs.iter().filter(|&&m| standing(m) == Standing::ParentRow))
                    .filter_map(|&m| samples[m as usize].label)
                    .collect()
            });
            inputs.sort_by_key(|&m| standing(m));
            for (m, kept) in keep(audit, &inputs, cfg, locked.as_ref(), |m| {
                standing(m) == Standing::ParentRow
            }) {
                let kept = if tainted.contains(&u64::from(m)) {
                    Err(Drop::Contaminated)
                } else {
                    kept
                };
                let part = match (olds.len(), olds.first()) {
                    (1, Some(&p)) => Ok(p),
                    (0, _) => Ok(placed),
                    _ => old(m).ok_or(Drop::Bridge),
                };
                if kept.is_ok() && old(m).is_none() {
                    plan.pulled += u64::from(olds.len() == 1 && part != Ok(placed));
                    plan.bridges += u64::from(part == Err(Drop::Bridge));
                }
                if kept == Err(Drop::Locked) {
                    let with = anchored.first().copied().unwrap_or(m);
                    plan.locked.push((m, with, old(with).unwrap_or(0)));
                }
                plan.fate[m as usize] = kept.and(part);
            }
        }
        plan
    }

    /// The sorted content hashes of each partition.
    fn hashes(&self, audit: &Audit) -> [Vec<u128>; 3] {
        let samples = &audit.index.samples;
        std::array::from_fn(|p| {
            let mut h: Vec<u128> = (0..self.fate.len())
                .filter(|&i| self.fate[i] == Ok(p as u8))
                .map(|i| samples[i].content)
                .collect();
            h.sort_unstable();
            h
        })
    }

    fn manifest(
        &self,
        audit: &Audit,
        cfg: &SplitConfig,
        files: &[Option<Written>; 3],
        guard: Guard,
        hashes: [Vec<u128>; 3],
        source: &Source,
    ) -> Manifest {
        let samples = &audit.index.samples;
        let partitions = hashes
            .into_iter()
            .enumerate()
            .map(|(p, hashes)| {
                let w = files[p].as_ref();
                PartitionInfo {
                    name: PARTITIONS[p].into(),
                    file: file_name(p, source.format()),
                    count: hashes.len() as u64,
                    file_xxh3: w.map_or_else(|| hash_hex(xxh3_128(b"")), |w| hash_hex(w.digest)),
                    content_hashes: hashes.into_iter().map(hash_hex).collect(),
                }
            })
            .collect();
        let mut dropped = BTreeMap::new();
        for (name, why) in [
            ("conflict", Drop::Conflict),
            ("duplicate", Drop::Duplicate),
            ("empty", Drop::Empty),
            ("bridge", Drop::Bridge),
            ("contaminated", Drop::Contaminated),
            ("locked", Drop::Locked),
        ] {
            dropped.insert(
                name.into(),
                self.fate.iter().filter(|f| **f == Err(why)).count() as u64,
            );
        }
        dropped.insert("missing_text".into(), audit.index.missing_text.len() as u64);
        dropped.insert("bad_rows".into(), audit.index.bad_rows.len() as u64);
        Manifest {
            manifest_version: MANIFEST_VERSION,
            version: 1,
            parent: None,
            tool: format!("contrai-data {}", env!("CARGO_PKG_VERSION")),
            source: source.name(),
            source_xxh3: None,
            format: source.format(),
            params: cfg.manifest_params(),
            partitions,
            dropped,
            contamination: None,
            dropped_conflict_ids: (0..self.fate.len())
                .filter(|&i| self.fate[i] == Err(Drop::Conflict))
                .map(|i| samples[i].id.clone())
                .collect(),
            locked_conflicts: self
                .locked
                .iter()
                .map(|&(m, with, p)| {
                    let s = &samples[m as usize];
                    LockedConflict {
                        id: s.id.clone(),
                        label: s
                            .label
                            .map(|l| audit.index.labels[l as usize].clone())
                            .unwrap_or_default(),
                        parent_id: samples[with as usize].id.clone(),
                        partition: PARTITIONS[p as usize].into(),
                    }
                })
                .collect(),
            guard,
        }
    }
}

/// The partition of a cluster: a seeded hash of its key, compared with the cumulative ratios.
pub fn place(seed: u64, key: u128, ratios: &[f64; 3]) -> u8 {
    let mut bytes = [0u8; 24];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..].copy_from_slice(&key.to_le_bytes());
    let u = (xxh3_64(&bytes) >> 11) as f64 / (1u64 << 53) as f64;
    if u < ratios[0] {
        0
    } else if u < ratios[0] + ratios[1] {
        1
    } else {
        2
    }
}

/// Which members of one cluster are written (`Ok`) or dropped, after conflicts and dedup, in the
/// order given (the first kept of each text, or cluster, stays). With `locked` (the labels the
/// parent's samples of the cluster carry) the parent's rows are kept whatever their labels, and a
/// row whose label they do not carry is dropped as [`Drop::Locked`] (unless conflicts are kept).
fn keep(
    audit: &Audit,
    members: &[u32],
    cfg: &SplitConfig,
    locked: Option<&BTreeSet<u32>>,
    parent_row: impl Fn(u32) -> bool,
) -> Vec<(u32, std::result::Result<(), Drop>)> {
    let samples = &audit.index.samples;
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for &m in members {
        if let Some(l) = samples[m as usize].label {
            *counts.entry(l).or_default() += 1;
        }
    }
    let top = counts.values().copied().max().unwrap_or(0);
    let winners: Vec<u32> = counts
        .iter()
        .filter(|(_, n)| **n == top)
        .map(|(l, _)| *l)
        .collect();
    let conflict = counts.len() > 1;
    let label_ok = |m: u32| -> std::result::Result<(), Drop> {
        let label = samples[m as usize].label;
        if let Some(locked) = locked {
            let fits = parent_row(m) || label.is_none_or(|l| locked.is_empty() || locked.contains(&l));
            return if fits || cfg.on_conflict == OnConflict::Keep {
                Ok(())
            } else {
                Err(Drop::Locked)
            };
        }
        let fits = !conflict
            || match cfg.on_conflict {
                OnConflict::Keep => true,
                OnConflict::Drop => false,
                OnConflict::Majority => winners.len() == 1 && label == Some(winners[0]),
            };
        if fits { Ok(()) } else { Err(Drop::Conflict) }
    };
    let mut seen_text = HashSet::new();
    let mut seen_cluster = false;
    members
        .iter()
        .map(|&m| {
            let s = &samples[m as usize];
            let fate = if s.words == 0 {
                Err(Drop::Empty)
            } else {
                label_ok(m).and_then(|()| {
                    let dup = match cfg.dedup {
                        Dedup::None => false,
                        Dedup::Exact => !seen_text.insert(s.content),
                        Dedup::Near => std::mem::replace(&mut seen_cluster, true),
                    };
                    if dup { Err(Drop::Duplicate) } else { Ok(()) }
                })
            };
            (m, fate)
        })
        .collect()
}

fn file_name(p: usize, format: Format) -> String {
    format!("{}.{}", PARTITIONS[p], format.extension())
}

/// A partition file written but not yet committed.
struct Written {
    file: AtomicFile,
    digest: u128,
}

/// Pass 3: re-reads the input and writes each kept row to its partition's temporary file.
fn write_partitions(
    source: &Source,
    out: &Path,
    audit: &Audit,
    plan: &Plan,
    cfg: &SplitConfig,
    progress: &dyn Progress,
) -> Result<[Option<Written>; 3]> {
    let counts: Vec<usize> = (0..3)
        .map(|p| plan.fate.iter().filter(|f| **f == Ok(p as u8)).count())
        .collect();
    let mut files: Vec<Option<AtomicFile>> = Vec::new();
    let mut writers: Vec<Option<RowWriter>> = Vec::new();
    for (p, &n) in counts.iter().enumerate() {
        if n == 0 {
            files.push(None);
            writers.push(None);
            continue;
        }
        let f = AtomicFile::create(out.join(file_name(p, source.format())))?;
        writers.push(Some(RowWriter::new(f.handle()?, f.dest(), source)?));
        files.push(Some(f));
    }
    progress.stage("writing partitions", source.progress_total());
    let mut next = 0usize;
    let mut scratch = crate::index::Index::default();
    let mut failure = None;
    for_each_chunk(
        source,
        &cfg.audit.fields,
        true,
        &mut scratch,
        progress,
        |chunk, _| {
            for rec in chunk {
                if let Ok(p) = plan.fate[next]
                    && failure.is_none()
                    && let Some(w) = writers[p as usize].as_mut()
                    && let Err(e) = w.write(&rec.raw)
                {
                    failure = Some(e);
                }
                next += 1;
            }
        },
    )?;
    progress.finish();
    if let Some(e) = failure {
        return Err(e);
    }
    debug_assert_eq!(next, audit.index.samples.iter().filter(|s| s.source == 0).count());
    for w in writers.into_iter().flatten() {
        w.finish()?;
    }
    let mut written: [Option<Written>; 3] = [None, None, None];
    for (p, f) in files.into_iter().enumerate() {
        if let Some(file) = f {
            let bytes = std::fs::read(file.temp_path()).map_err(|e| DataError::io(file.dest(), e))?;
            written[p] = Some(Written {
                digest: xxh3_128(&bytes),
                file,
            });
        }
    }
    Ok(written)
}

/// Re-reads the written files and fails, naming the ids, if any cluster spans two partitions.
fn guard(
    files: &[Option<Written>; 3],
    source: &Source,
    audit_cfg: &AuditConfig,
    progress: &dyn Progress,
) -> Result<Guard> {
    let parts: Vec<(usize, Source)> = files
        .iter()
        .enumerate()
        .filter_map(|(p, w)| {
            w.as_ref().map(|w| {
                (
                    p,
                    // Read as written: in the input's format, under a header row.
                    Source::of_format(w.file.temp_path(), source.format()),
                )
            })
        })
        .collect();
    // The files as written are read fresh: no store beside temporary files.
    let cfg = AuditConfig {
        skip_bad: false,
        store: None,
        ..audit_cfg.clone()
    };
    let audit = Audit::run(parts.iter().map(|(_, s)| s.clone()).collect(), cfg, progress)?;
    let samples = &audit.index.samples;
    let part_of = |m: u32| parts[samples[m as usize].source as usize].0;
    let mut leaks = Vec::new();
    let mut texts: BTreeMap<u128, HashSet<usize>> = BTreeMap::new();
    for (m, sample) in samples.iter().enumerate() {
        texts.entry(sample.content).or_default().insert(part_of(m as u32));
    }
    let shared = texts.values().filter(|ps| ps.len() > 1).count() as u64;
    let cross = audit
        .clustering
        .verified_pairs
        .iter()
        .filter(|&&(a, b, _)| part_of(a) != part_of(b))
        .count() as u64;
    for members in &audit.clustering.clusters {
        let first = part_of(members[0]);
        if members.iter().any(|&m| part_of(m) != first) {
            let ids: Vec<String> = members
                .iter()
                .map(|&m| format!("{}:{}", PARTITIONS[part_of(m)], samples[m as usize].id))
                .collect();
            leaks.push(ids.join(" ~ "));
        }
    }
    if !leaks.is_empty() {
        return Err(DataError::Leak {
            count: leaks.len(),
            examples: leaks.iter().take(5).cloned().collect::<Vec<_>>().join("; "),
        });
    }
    Ok(Guard {
        shared_content_hashes: shared,
        cross_partition_near_pairs: cross,
        passed: shared == 0 && cross == 0,
    })
}
