//! The sample index: content hashes, candidate keys, verified near-copy clusters.
//!
//! Memory stays proportional to the number of samples: the first streaming pass keeps a few
//! hashes a sample (content hash, candidate keys — [`KeyLayout`]) and, within a fixed budget, the
//! texts' fingerprints (words and shingles); when those did not fit, a second pass re-reads only
//! the candidates' texts. Every candidate pair is verified against [`crate::near`]'s definition.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::sync_channel;

use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_128;

use crate::cluster::{UnionFind, id_order};
use crate::error::{DataError, Result};
use crate::minhash::{KeyLayout, MinHasher};
use crate::near::{EDIT_BANDS_AGREEING, EditRule, Fingerprint, one_edit_keys};
use crate::progress::Progress;
use crate::read::{FieldSpec, Record, Source};
use crate::store::{Entry, Store, StoreDir};
use crate::text::{Shingling, content_hash, normalize};

mod config;
pub use config::{Content, IndexConfig};

/// Seed of the MinHash family: fixed, so signatures never change between runs or versions.
pub(crate) const MINHASH_SEED: u64 = 0x00c0_47a1_5eed;
/// Rows handed to the hashing threads at a time.
const CHUNK: usize = 1024;
/// Hashes of fingerprints (words and shingles) kept from pass 1 by default (8 bytes each: 64 MiB).
pub const SHINGLE_CACHE: usize = 8 << 20;
/// Characters kept of each text for reports.
const SNIPPET_CHARS: usize = 80;

/// What pass 1 computes of a text, the same wherever it runs (the audit, the decontamination, a
/// Ray worker): the normalised text's hash and words, its fingerprint and candidate keys.
#[derive(Debug, Clone)]
pub struct Signer {
    shingling: Shingling,
    hasher: MinHasher,
    layout: KeyLayout,
}

/// A text as [`Signer::sign`] sees it.
#[derive(Debug, Clone)]
pub struct Signed {
    /// xxh3-128 of the normalised text.
    pub content: u128,
    /// Its words.
    pub words: u32,
    /// Its candidate keys, laid out as [`KeyLayout`] says (0: a key it does not have; all 0 for
    /// an empty text, which is never a candidate).
    pub keys: Vec<u64>,
    /// Its words and shingles, for verification (unsettled: [`Fingerprint::settled`] first).
    pub fingerprint: Fingerprint,
}

impl Signer {
    /// The signer of a configuration (the MinHash family is drawn from a fixed seed).
    pub fn new(cfg: &IndexConfig) -> Signer {
        Signer {
            shingling: cfg.shingling,
            hasher: MinHasher::new(cfg.num_perm, MINHASH_SEED),
            layout: cfg.layout(),
        }
    }

    /// The layout its keys follow.
    pub fn layout(&self) -> KeyLayout {
        self.layout
    }

    /// Signs a text (raw, as read).
    pub fn sign(&self, text: &str) -> Signed {
        self.sign_normalized(&normalize(text))
    }

    /// Signs an already normalised text.
    pub fn sign_normalized(&self, norm: &str) -> Signed {
        let fingerprint = Fingerprint::unsettled(norm, &self.shingling);
        let words = fingerprint.words.len();
        let mut keys = Vec::with_capacity(self.layout.len());
        if words == 0 {
            keys.resize(self.layout.len(), 0);
        } else {
            let signature = self.hasher.signature(&fingerprint.shingles);
            self.layout.jaccard.keys_into(&signature, &mut keys);
            if let Some((banding, rule)) = &self.layout.edits {
                if words >= rule.many_edits_from() {
                    banding.keys_into(&signature, &mut keys);
                } else {
                    keys.resize(keys.len() + banding.bands, 0);
                }
                keys.extend(one_edit_keys(&fingerprint.words, rule));
            }
        }
        Signed {
            content: content_hash(norm),
            words: words as u32,
            keys,
            fingerprint,
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
    /// Each key slot's keys, a sample after another (slot-major: the candidate search reads one
    /// slot of every sample at a time).
    keys_by_slot: Vec<Vec<u64>>,
    layout: Option<KeyLayout>,
    /// Each sample's fingerprint, while they fit in the configured cache.
    fingerprints: Option<Vec<Fingerprint>>,
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
    fingerprint: Fingerprint,
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
        let layout = signer.layout();
        let mut index = Index {
            // Numeric samples are compared for equality only.
            layout: cfg.content.is_text().then_some(layout),
            keys_by_slot: vec![Vec::new(); if cfg.content.is_text() { layout.len() } else { 0 }],
            fingerprints: Some(Vec::new()),
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
                .map(|p| Store::open(p, layout.len()));
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
                        // Stored texts come without fingerprints: pass 2 re-reads the candidates.
                        index.fingerprints = None;
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
                    for (slot, key) in index.keys_by_slot.iter_mut().zip(h.keys) {
                        slot.push(key);
                    }
                    index.cache(h.fingerprint);
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

    /// The candidate keys of sample `i` (none for numeric samples, which have no near-copies).
    pub fn candidate_keys(&self, i: usize) -> Option<Vec<u64>> {
        self.layout?;
        self.keys_by_slot
            .iter()
            .map(|slot| slot.get(i).copied())
            .collect()
    }

    /// Keeps a sample's fingerprint while the cache has room; drops the whole cache once it is full.
    fn cache(&mut self, fingerprint: Fingerprint) {
        self.cached += fingerprint.len();
        if self.cached > self.cache_limit {
            self.fingerprints = None;
        }
        if let Some(c) = self.fingerprints.as_mut() {
            c.push(fingerprint);
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
        let prints =
            self.collect_fingerprints(sources, fields, cfg, &group_of, &groups, &needed, progress)?;
        let near = cfg.near_copy();
        let verified: Vec<(u32, u32, f64)> = candidates
            .par_iter()
            .filter_map(|&(a, b)| {
                let m = near.judge(&prints[&a], &prints[&b])?;
                Some((groups[a as usize][0], groups[b as usize][0], m.jaccard()))
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

    /// Pairs of groups that share a key of one group of slots ([`KeyLayout::groups`]), sorted and
    /// deduplicated; rule 1's bands pair only texts within their edit budget, and count when
    /// [`EDIT_BANDS_AGREEING`] of them agree.
    fn candidates(&self, groups: &[Vec<u32>]) -> Vec<(u32, u32)> {
        let Some(layout) = self.layout else {
            return Vec::new();
        };
        let live: Vec<u32> = (0..groups.len() as u32)
            .filter(|&g| self.samples[groups[g as usize][0] as usize].words > 0)
            .collect();
        // (a, b, votes): a key of rule 2 or an exact key is enough alone, a band of rule 1 a vote.
        let enough = EDIT_BANDS_AGREEING as u32;
        let all = layout.groups();
        let mut pairs: Vec<(u32, u32, u32)> = all
            .par_iter()
            .flat_map_iter(|(slots, window)| {
                let keyed = sort_hashed(live.len() * slots.len(), |push| {
                    for &g in &live {
                        let first = groups[g as usize][0] as usize;
                        let words = self.samples[first].words;
                        for &s in slots {
                            let key = self.keys_by_slot[s][first];
                            if key != 0 {
                                push((key, words, g));
                            }
                        }
                    }
                });
                bucket_pairs(keyed, *window, enough)
            })
            .collect();
        pairs.par_sort_unstable();
        pairs
            .chunk_by(|x, y| (x.0, x.1) == (y.0, y.1))
            .filter(|run| run.iter().map(|p| p.2).sum::<u32>() >= enough)
            .map(|run| (run[0].0, run[0].1))
            .collect()
    }

    /// Pass 2: the fingerprints of the groups that take part in a candidate pair.
    #[allow(clippy::too_many_arguments)]
    fn collect_fingerprints(
        &self,
        sources: &[Source],
        fields: &FieldSpec,
        cfg: &IndexConfig,
        group_of: &[u32],
        groups: &[Vec<u32>],
        needed: &[bool],
        progress: &dyn Progress,
    ) -> Result<HashMap<u32, Fingerprint>> {
        let mut out = HashMap::new();
        if !needed.iter().any(|&n| n) {
            return Ok(out);
        }
        if let Some(cache) = &self.fingerprints {
            for (g, members) in groups.iter().enumerate().filter(|(g, _)| needed[*g]) {
                out.insert(g as u32, cache[members[0] as usize].clone().settled());
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
                let sets: Vec<(u32, Fingerprint)> = wanted
                    .into_par_iter()
                    .map(|(g, text)| (g, Fingerprint::of(&normalize(&text), &cfg.shingling)))
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

/// The pairs of texts that share a key, from `(key, words, group)` sorted by key then length:
/// within rule 1's `window` only texts within the budget, each pair with one vote; elsewhere
/// `enough` votes.
fn bucket_pairs(keyed: Vec<(u64, u32, u32)>, window: Option<EditRule>, enough: u32) -> Vec<(u32, u32, u32)> {
    let votes = if window.is_some() { 1 } else { enough };
    let mut out = Vec::new();
    for run in keyed.chunk_by(|x, y| x.0 == y.0).filter(|r| r.len() > 1) {
        let texts: Vec<(u32, u32)> = run.iter().map(|&(_, words, g)| (words, g)).collect();
        out.extend(pairs_within(&texts, window).map(|(a, b)| (a.min(b), a.max(b), votes)));
    }
    out
}

/// The pairs among texts that share one key, `(words, id)` sorted by words: all of them, or in a
/// band of rule 1 (`window`) only those whose lengths are within the edit budget.
pub fn pairs_within(texts: &[(u32, u32)], window: Option<EditRule>) -> impl Iterator<Item = (u32, u32)> + '_ {
    texts.iter().enumerate().flat_map(move |(i, &(short, a))| {
        texts[i + 1..]
            .iter()
            .take_while(move |&&(long, _)| {
                window.is_none_or(|rule| (long - short) as usize <= rule.budget(long as usize))
            })
            .filter(move |&&(_, b)| a != b)
            .map(move |&(_, b)| (a, b))
    })
}

/// The items `each` gives (at most `capacity`, each at most twice), sorted, in linear time: their
/// first field is a uniform hash, so a counting pass on its top bits leaves buckets of a few items
/// each to sort. `each` is called twice, to count and to place.
fn sort_hashed(capacity: usize, each: impl Fn(&mut dyn FnMut((u64, u32, u32)))) -> Vec<(u64, u32, u32)> {
    // About four items a bucket: few enough to sort at once, buckets few enough to stay cached.
    let bits = (usize::BITS - (capacity / 4).leading_zeros()).clamp(1, 20);
    let bucket = |x: &(u64, u32, u32)| (x.0 >> (64 - bits)) as usize;
    let mut starts = vec![0u32; (1 << bits) + 1];
    each(&mut |x| starts[bucket(&x) + 1] += 1);
    for b in 1..starts.len() {
        starts[b] += starts[b - 1];
    }
    let mut next = starts.clone();
    let mut out = vec![(0u64, 0u32, 0u32); starts[starts.len() - 1] as usize];
    each(&mut |x| {
        let b = bucket(&x);
        out[next[b] as usize] = x;
        next[b] += 1;
    });
    for w in starts.windows(2) {
        if w[1] - w[0] > 1 {
            out[w[0] as usize..w[1] as usize].sort_unstable();
        }
    }
    out
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
    let (content, words, keys, fingerprint) = match (cfg.content, known) {
        (Content::Text, Some(e)) => (
            e.content,
            e.words as usize,
            e.keys.clone(),
            Fingerprint::default(),
        ),
        (Content::Text, None) => {
            let s = signer.sign(&text);
            (s.content, s.words as usize, s.keys, s.fingerprint)
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
            (hash, values.len(), Vec::new(), Fingerprint::default())
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
        fingerprint,
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

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    #[test]
    fn hashed_items_sort_as_any_sort_would() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for n in [0, 3, 63, 64, 1000, 70_000] {
            // Few distinct keys as well: equal keys must end up together, sorted by the rest.
            let items: Vec<(u64, u32, u32)> = (0..n)
                .map(|_| {
                    let key = rng.random::<u64>() >> (rng.random_range(0..2u32) * 60);
                    (key, rng.random(), rng.random())
                })
                .collect();
            let mut want = items.clone();
            want.sort_unstable();
            let got = super::sort_hashed(n, |push| items.iter().for_each(|&x| push(x)));
            assert_eq!(got, want);
        }
    }
}
