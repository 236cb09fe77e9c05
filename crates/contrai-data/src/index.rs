//! The sample index: content hashes, MinHash-LSH candidates, verified near-duplicate clusters.
//!
//! Memory stays proportional to the number of samples: the first streaming pass keeps a few
//! hashes a sample (content hash, LSH band keys) and, within a fixed budget, the shingle sets;
//! when those did not fit, a second pass re-reads only the candidates' texts to verify each
//! candidate pair by its exact Jaccard similarity.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::sync_channel;

use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_128;

use crate::cluster::{UnionFind, id_order};
use crate::error::{DataError, Result};
use crate::minhash::{Banding, MinHasher};
use crate::progress::Progress;
use crate::read::{FieldSpec, Record, Source};
use crate::store::{Entry, Store, StoreDir};
use crate::text::{Shingling, content_hash, jaccard, normalize, word_count};

/// Seed of the MinHash family: fixed, so signatures never change between runs or versions.
pub(crate) const MINHASH_SEED: u64 = 0x00c0_47a1_5eed;
/// Rows handed to the hashing threads at a time.
const CHUNK: usize = 1024;
/// Shingle hashes kept from pass 1 by default (8 bytes each: 64 MiB).
pub const SHINGLE_CACHE: usize = 8 << 20;
/// Characters kept of each text for reports.
const SNIPPET_CHARS: usize = 80;

/// What the text field holds, which decides what "the same sample" means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Content {
    /// Natural-language text: normalised for exact duplicates, shingled for near-duplicates.
    #[default]
    Text,
    /// A vector of numbers (an MLP's features): duplicates are equal vectors; there is no
    /// near-duplicate search and no text check (emptiness aside).
    Numeric,
}

impl Content {
    fn is_text(&self) -> bool {
        *self == Content::Text
    }
}

/// How near-duplicates are found.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IndexConfig {
    /// What the text field holds (written into manifests only when not text).
    #[serde(default, skip_serializing_if = "Content::is_text")]
    pub content: Content,
    /// Verified Jaccard similarity at or above which two texts are near-duplicates.
    pub threshold: f64,
    /// MinHash functions a signature.
    pub num_perm: usize,
    /// Probability of finding a pair right at the threshold, used to choose the banding.
    pub recall_at_threshold: f64,
    /// Shingling.
    pub shingling: Shingling,
    /// Shingle hashes kept from pass 1: while all fit, pass 2 (re-reading candidates' texts) is
    /// skipped; beyond it the cache is dropped, so memory stays proportional to the samples.
    #[serde(skip, default = "default_cache")]
    pub shingle_cache: usize,
}

fn default_cache() -> usize {
    SHINGLE_CACHE
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            content: Content::Text,
            threshold: 0.8,
            num_perm: 256,
            recall_at_threshold: 0.85,
            shingling: Shingling::default(),
            shingle_cache: SHINGLE_CACHE,
        }
    }
}

impl IndexConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<()> {
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(DataError::Param(format!(
                "threshold {} is not in (0, 1]",
                self.threshold
            )));
        }
        if !(16..=4096).contains(&self.num_perm) {
            return Err(DataError::Param(format!(
                "num_perm {} is not in 16..=4096",
                self.num_perm
            )));
        }
        if self.shingling.word_ngram == 0 || self.shingling.char_ngram == 0 {
            return Err(DataError::Param("shingle sizes must be at least 1".into()));
        }
        Ok(())
    }

    /// The LSH banding this configuration uses.
    pub fn banding(&self) -> Banding {
        Banding::for_recall(self.num_perm, self.threshold, self.recall_at_threshold)
    }
}

/// What pass 1 computes of a text, the same wherever it runs (the audit, the decontamination, a
/// Ray worker): the normalised text's hash and words, its shingles and LSH band keys.
#[derive(Debug, Clone)]
pub struct Signer {
    shingling: Shingling,
    hasher: MinHasher,
    banding: Banding,
}

/// A text as [`Signer::sign`] sees it.
#[derive(Debug, Clone)]
pub struct Signed {
    /// xxh3-128 of the normalised text.
    pub content: u128,
    /// Its words.
    pub words: u32,
    /// Its band keys (zeros for an empty text, which is never a candidate).
    pub keys: Vec<u64>,
    /// Its sorted shingle hashes.
    pub shingles: Vec<u64>,
}

impl Signer {
    /// The signer of a configuration (the MinHash family is drawn from a fixed seed).
    pub fn new(cfg: &IndexConfig) -> Signer {
        Signer {
            shingling: cfg.shingling,
            hasher: MinHasher::new(cfg.num_perm, MINHASH_SEED),
            banding: cfg.banding(),
        }
    }

    /// The banding its keys follow.
    pub fn banding(&self) -> Banding {
        self.banding
    }

    /// Signs a text (raw, as read).
    pub fn sign(&self, text: &str) -> Signed {
        self.sign_normalized(&normalize(text))
    }

    /// Signs an already normalised text.
    pub fn sign_normalized(&self, norm: &str) -> Signed {
        let words = word_count(norm);
        let shingles = self.shingling.shingles(norm);
        let keys = if words == 0 {
            vec![0; self.banding.bands]
        } else {
            self.banding.keys(&self.hasher.signature(&shingles))
        };
        Signed {
            content: content_hash(norm),
            words: words as u32,
            keys,
            shingles,
        }
    }
}

/// One sample as the index keeps it.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its id (the id field, or the line number).
    pub id: String,
    /// Its line or row number in its source.
    pub line: u64,
    /// Which input it came from (index into the sources given to [`Index::build`]).
    pub source: u8,
    /// Index into [`Index::labels`].
    pub label: Option<u32>,
    /// Hash of the normalised text.
    pub content: u128,
    /// Hash of the text byte for byte.
    pub raw: u128,
    /// Words in the normalised text.
    pub words: u32,
    /// The start of the text, whitespace collapsed.
    pub snippet: String,
}

/// A row that was read but not indexed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Skipped {
    /// Source name and line.
    pub at: String,
    /// Why.
    pub reason: String,
}

/// Everything learnt from the rows, before clustering.
#[derive(Debug, Default)]
pub struct Index {
    /// The indexed samples, in reading order.
    pub samples: Vec<Sample>,
    /// Distinct labels, in order of first appearance.
    pub labels: Vec<String>,
    /// Rows that did not parse (only with `skip_bad`).
    pub bad_rows: Vec<Skipped>,
    /// Rows whose text field was absent or null.
    pub missing_text: Vec<Skipped>,
    /// Rows read (good, bad and missing).
    pub rows: u64,
    /// Texts hashed (MinHash computed) and texts whose hashes came from a persisted store.
    pub hashed: u64,
    /// Texts whose hashes came from a persisted store.
    pub reused: u64,
    /// The persisted stores used, and what went wrong writing one (it is only a cache).
    pub stores: Vec<String>,
    /// Why a store could not be written, when it could not.
    pub store_note: Option<String>,
    band_keys: Vec<u64>,
    banding: Option<Banding>,
    /// Each sample's shingles, while they fit in the configured cache.
    shingle_cache: Option<Vec<Vec<u64>>>,
    cached: usize,
    cache_limit: usize,
}

/// The verified clusters of an index.
#[derive(Debug, Clone)]
pub struct Clustering {
    /// Cluster of each sample.
    pub cluster_of: Vec<u32>,
    /// Clusters, each with its members sorted by id (the first is the representative).
    pub clusters: Vec<Vec<u32>>,
    /// Distinct normalised texts of each cluster.
    pub distinct: Vec<u32>,
    /// Candidate pairs of distinct texts produced by LSH.
    pub candidate_pairs: u64,
    /// Candidate pairs whose exact Jaccard reached the threshold, as the first sample of each
    /// text's group, with their Jaccard similarity.
    pub verified_pairs: Vec<(u32, u32, f64)>,
}

/// What pass 1 computes for one row.
struct Hashed {
    sample: Sample,
    label: Option<String>,
    keys: Vec<u64>,
    shingles: Vec<u64>,
    /// Its hashes came from the persisted store.
    reused: bool,
}

impl Index {
    /// Reads every source once and hashes each sample (pass 1).
    pub fn build(
        sources: &[Source],
        fields: &FieldSpec,
        cfg: &IndexConfig,
        skip_bad: bool,
        store_dir: Option<&StoreDir>,
        progress: &dyn Progress,
    ) -> Result<Index> {
        cfg.validate()?;
        let signer = Signer::new(cfg);
        let banding = signer.banding();
        let mut index = Index {
            // Numeric samples are compared for equality only.
            banding: cfg.content.is_text().then_some(banding),
            shingle_cache: Some(Vec::new()),
            cache_limit: cfg.shingle_cache,
            ..Index::default()
        };
        let mut label_ids: HashMap<String, u32> = HashMap::new();
        let mut failure = None;
        for (tag, source) in sources.iter().enumerate() {
            progress.stage(&format!("hashing {}", source.name()), source.progress_total());
            let name = source.name();
            let mut store = store_dir
                .filter(|_| cfg.content.is_text())
                .and_then(|d| Store::path_for(source, d, cfg))
                .map(|p| Store::open(p, banding.bands));
            for_each_chunk(source, fields, skip_bad, &mut index, progress, |chunk, index| {
                let known = store.as_ref();
                let hashed: Vec<Result<Hashed>> = chunk
                    .into_par_iter()
                    .map(|rec| hash_record(rec, (tag as u8, &name, &fields.text), cfg, &signer, known))
                    .collect();
                for h in hashed {
                    let h = match h {
                        Ok(h) => h,
                        Err(e) if skip_bad => {
                            index.bad_rows.push(Skipped {
                                at: name.clone(),
                                reason: e.to_string(),
                            });
                            continue;
                        }
                        Err(e) => {
                            failure.get_or_insert(e);
                            continue;
                        }
                    };
                    let label = h.label.map(|l| {
                        let next = label_ids.len() as u32;
                        *label_ids.entry(l.clone()).or_insert_with(|| {
                            index.labels.push(l);
                            next
                        })
                    });
                    if h.reused {
                        index.reused += 1;
                        // Stored texts come without shingles: pass 2 re-reads the candidates.
                        index.shingle_cache = None;
                    } else {
                        index.hashed += 1;
                        if let Some(s) = store.as_mut() {
                            let entry = Entry {
                                content: h.sample.content,
                                words: h.sample.words,
                                keys: h.keys.clone(),
                            };
                            s.insert(h.sample.raw, entry);
                        }
                    }
                    index.samples.push(Sample { label, ..h.sample });
                    index.band_keys.extend(h.keys);
                    index.cache(h.shingles);
                }
            })?;
            progress.finish();
            if let Some(s) = &store {
                index.stores.push(s.path().display().to_string());
                if let Err(e) = s.save() {
                    index.store_note = Some(format!("the index was not kept: {e}"));
                }
            }
            if let Some(e) = failure.take() {
                return Err(e);
            }
        }
        Ok(index)
    }

    /// The LSH band keys of sample `i` (none for numeric samples, which have no banding).
    pub fn band_keys(&self, i: usize) -> Option<&[u64]> {
        let bands = self.banding?.bands;
        self.band_keys.get(i * bands..(i + 1) * bands)
    }

    /// Keeps a sample's shingles while the cache has room; drops the whole cache once it is full.
    fn cache(&mut self, shingles: Vec<u64>) {
        self.cached += shingles.len();
        if self.cached > self.cache_limit {
            self.shingle_cache = None;
        }
        if let Some(c) = self.shingle_cache.as_mut() {
            c.push(shingles);
        }
    }

    /// Finds exact groups, LSH candidates, verifies them (pass 2) and forms clusters.
    pub fn cluster(
        &self,
        sources: &[Source],
        fields: &FieldSpec,
        cfg: &IndexConfig,
        progress: &dyn Progress,
    ) -> Result<Clustering> {
        let (group_of, groups) = self.exact_groups();
        let candidates = self.candidates(&groups);
        let needed: Vec<bool> = {
            let mut n = vec![false; groups.len()];
            for &(a, b) in &candidates {
                n[a as usize] = true;
                n[b as usize] = true;
            }
            n
        };
        let shingles = self.collect_shingles(sources, fields, cfg, &group_of, &groups, &needed, progress)?;
        let verified: Vec<(u32, u32, f64)> = candidates
            .par_iter()
            .filter_map(|&(a, b)| {
                let j = jaccard(&shingles[&a], &shingles[&b]);
                (j >= cfg.threshold).then_some((groups[a as usize][0], groups[b as usize][0], j))
            })
            .collect();
        let mut uf = UnionFind::new(groups.len());
        for &(a, b, _) in &verified {
            uf.union(group_of[a as usize], group_of[b as usize]);
        }
        Ok(self.components(&groups, &mut uf, candidates.len() as u64, verified))
    }

    /// Groups samples by content hash; empty texts stay alone (they are reported separately).
    fn exact_groups(&self) -> (Vec<u32>, Vec<Vec<u32>>) {
        let mut by_hash: HashMap<u128, u32> = HashMap::new();
        let mut groups: Vec<Vec<u32>> = Vec::new();
        let mut group_of = Vec::with_capacity(self.samples.len());
        for (i, s) in self.samples.iter().enumerate() {
            let g = if s.words == 0 {
                groups.push(Vec::new());
                groups.len() as u32 - 1
            } else {
                *by_hash.entry(s.content).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() as u32 - 1
                })
            };
            groups[g as usize].push(i as u32);
            group_of.push(g);
        }
        (group_of, groups)
    }

    /// Pairs of groups that share at least one LSH band, sorted and deduplicated.
    fn candidates(&self, groups: &[Vec<u32>]) -> Vec<(u32, u32)> {
        let Some(banding) = self.banding else {
            return Vec::new();
        };
        let nb = banding.bands;
        let live: Vec<u32> = (0..groups.len() as u32)
            .filter(|&g| self.samples[groups[g as usize][0] as usize].words > 0)
            .collect();
        let mut pairs: Vec<(u32, u32)> = (0..nb)
            .into_par_iter()
            .flat_map_iter(|band| {
                let mut keyed: Vec<(u64, u32)> = live
                    .iter()
                    .map(|&g| (self.band_keys[groups[g as usize][0] as usize * nb + band], g))
                    .collect();
                keyed.sort_unstable();
                let mut out = Vec::new();
                for run in keyed.chunk_by(|x, y| x.0 == y.0).filter(|r| r.len() > 1) {
                    for (i, &(_, a)) in run.iter().enumerate() {
                        out.extend(run[i + 1..].iter().map(|&(_, b)| (a.min(b), a.max(b))));
                    }
                }
                out
            })
            .collect();
        pairs.par_sort_unstable();
        pairs.dedup();
        pairs
    }

    /// Pass 2: the shingle sets of the groups that take part in a candidate pair.
    #[allow(clippy::too_many_arguments)]
    fn collect_shingles(
        &self,
        sources: &[Source],
        fields: &FieldSpec,
        cfg: &IndexConfig,
        group_of: &[u32],
        groups: &[Vec<u32>],
        needed: &[bool],
        progress: &dyn Progress,
    ) -> Result<HashMap<u32, Vec<u64>>> {
        let mut out = HashMap::new();
        if !needed.iter().any(|&n| n) {
            return Ok(out);
        }
        if let Some(cache) = &self.shingle_cache {
            for (g, members) in groups.iter().enumerate().filter(|(g, _)| needed[*g]) {
                out.insert(g as u32, cache[members[0] as usize].clone());
            }
            return Ok(out);
        }
        let mut next = 0usize;
        for source in sources {
            progress.stage(&format!("verifying {}", source.name()), source.progress_total());
            let mut scratch = Index::default();
            for_each_chunk(source, fields, true, &mut scratch, progress, |chunk, _| {
                let mut wanted = Vec::new();
                for rec in chunk {
                    let g = group_of[next];
                    if needed[g as usize] && groups[g as usize][0] as usize == next {
                        wanted.push((g, rec.text.unwrap_or_default()));
                    }
                    next += 1;
                }
                let sets: Vec<(u32, Vec<u64>)> = wanted
                    .into_par_iter()
                    .map(|(g, text)| (g, cfg.shingling.shingles(&normalize(&text))))
                    .collect();
                out.extend(sets);
            })?;
            progress.finish();
        }
        Ok(out)
    }

    /// Turns union-find components of groups into clusters of samples.
    fn components(
        &self,
        groups: &[Vec<u32>],
        uf: &mut UnionFind,
        candidate_pairs: u64,
        verified_pairs: Vec<(u32, u32, f64)>,
    ) -> Clustering {
        let mut by_root: BTreeMap<u32, (Vec<u32>, u32)> = BTreeMap::new();
        for g in 0..groups.len() as u32 {
            let e = by_root.entry(uf.find(g)).or_default();
            e.0.extend(&groups[g as usize]);
            e.1 += 1;
        }
        let mut clusters: Vec<(Vec<u32>, u32)> = by_root.into_values().collect();
        for (members, _) in &mut clusters {
            members.sort_by(|&a, &b| self.order(a, b));
        }
        // Order clusters by their representative, so numbering never depends on input order.
        clusters.sort_by(|a, b| self.order(a.0[0], b.0[0]));
        let mut cluster_of = vec![0u32; self.samples.len()];
        for (c, (members, _)) in clusters.iter().enumerate() {
            for &m in members {
                cluster_of[m as usize] = c as u32;
            }
        }
        let (clusters, distinct) = clusters.into_iter().unzip();
        Clustering {
            cluster_of,
            clusters,
            distinct,
            candidate_pairs,
            verified_pairs,
        }
    }

    /// Orders two samples by id, then by source and line so the order is total.
    pub fn order(&self, a: u32, b: u32) -> std::cmp::Ordering {
        let (x, y) = (&self.samples[a as usize], &self.samples[b as usize]);
        id_order(&x.id, &y.id)
            .then(x.source.cmp(&y.source))
            .then(x.line.cmp(&y.line))
    }
}

/// Hashes one record (pass 1), or takes its hashes from the persisted store when it holds the
/// text; a numeric sample whose field does not parse is a row error.
fn hash_record(
    rec: Record,
    (source, name, field): (u8, &str, &str),
    cfg: &IndexConfig,
    signer: &Signer,
    store: Option<&Store>,
) -> Result<Hashed> {
    let text = rec.text.unwrap_or_default();
    let raw = xxh3_128(text.as_bytes());
    let known = store.and_then(|s| s.get(raw));
    let (content, words, keys, shingles) = match (cfg.content, known) {
        (Content::Text, Some(e)) => (e.content, e.words as usize, e.keys.clone(), Vec::new()),
        (Content::Text, None) => {
            let s = signer.sign(&text);
            (s.content, s.words as usize, s.keys, s.shingles)
        }
        (Content::Numeric, _) => {
            let values = crate::numeric::parse(&text).map_err(|what| DataError::Row {
                path: name.into(),
                line: rec.line,
                message: format!(
                    "field `{field}`: {what} (expected numeric features: a JSON array of numbers, or numbers separated by commas or spaces)"
                ),
            })?;
            let hash = crate::numeric::content_hash(&values);
            (hash, values.len(), Vec::new(), Vec::new())
        }
    };
    Ok(Hashed {
        sample: Sample {
            id: rec.id,
            line: rec.line,
            source,
            label: None,
            content,
            raw,
            words: words as u32,
            snippet: snippet(&text),
        },
        label: rec.label,
        keys,
        shingles,
        reused: known.is_some(),
    })
}

/// The first words of a text, whitespace collapsed, at most [`SNIPPET_CHARS`] characters.
fn snippet(text: &str) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if out.len() >= SNIPPET_CHARS * 4 {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out.chars().take(SNIPPET_CHARS).collect()
}

/// Reads a source in chunks on a reader thread and hands each chunk of good records to `f`.
///
/// Bad rows are counted in `index` when `skip_bad`, and end the read otherwise; rows without
/// text are counted and left out of the chunks.
pub(crate) fn for_each_chunk(
    source: &Source,
    fields: &FieldSpec,
    skip_bad: bool,
    index: &mut Index,
    progress: &dyn Progress,
    mut f: impl FnMut(Vec<Record>, &mut Index),
) -> Result<()> {
    let records = source.records(fields)?;
    let name = source.name();
    // Rows travel in batches: one hand-over a batch, not a wake-up a row.
    let (tx, rx) = sync_channel::<Vec<Result<Record>>>(2);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut batch = Vec::with_capacity(CHUNK);
            for rec in records {
                batch.push(rec);
                if batch.len() == CHUNK
                    && tx
                        .send(std::mem::replace(&mut batch, Vec::with_capacity(CHUNK)))
                        .is_err()
                {
                    return;
                }
            }
            let _ = tx.send(batch);
        });
        let mut chunk = Vec::with_capacity(CHUNK);
        for rec in rx.into_iter().flatten() {
            index.rows += 1;
            match rec {
                Ok(r) => {
                    progress.inc(r.progress);
                    if r.text.is_none() {
                        index.missing_text.push(Skipped {
                            at: format!("{name}:{}", r.line),
                            reason: format!("no `{}` value", fields.text),
                        });
                    } else {
                        chunk.push(r);
                    }
                    if chunk.len() == CHUNK {
                        f(std::mem::take(&mut chunk), index);
                    }
                }
                Err(e) if skip_bad && e.is_row_error() => index.bad_rows.push(Skipped {
                    at: name.clone(),
                    reason: e.to_string(),
                }),
                Err(e) => return Err(e),
            }
        }
        if !chunk.is_empty() {
            f(chunk, index);
        }
        Ok(())
    })
}
