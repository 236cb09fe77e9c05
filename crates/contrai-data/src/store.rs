//! The persisted index: each text's content hash, word count and LSH band keys, stored beside the
//! data and keyed by the hash of the text's raw bytes — content-addressed, so an unchanged corpus
//! is not hashed again, an appended (or edited, or reordered) one only for its new texts, and
//! Parquet and CSV files alike.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

use crate::error::Result;
use crate::index::{IndexConfig, MINHASH_SEED};
use crate::read::Source;
use crate::write::write_atomic;

/// The store's layout; a file of another version is rebuilt.
const MAGIC: &[u8; 8] = b"CTRSIG01";
/// The folder, beside the data, that holds the stores.
pub const DIR: &str = ".contrai-index";

/// Where the stores go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreDir {
    /// In [`DIR`] beside each data file.
    Beside,
    /// In this folder.
    In(PathBuf),
}

/// What pass 1 learnt of one text.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Hash of the normalised text.
    pub content: u128,
    /// Words of the normalised text.
    pub words: u32,
    /// Its candidate keys ([`crate::minhash::KeyLayout`]).
    pub keys: Vec<u64>,
}

/// One data file's store: what it held when opened, and what was added since (kept apart, so
/// that one run's answers never depend on the order its texts were hashed in).
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    bands: usize,
    entries: HashMap<u128, Entry>,
    added: HashMap<u128, Entry>,
}

impl Store {
    /// The store of a data file for these near-duplicate parameters (none for data in memory):
    /// `<dir>/<file name>.<parameters' hash>.sig`. Nothing is read yet.
    pub fn path_for(source: &Source, dir: &StoreDir, cfg: &IndexConfig) -> Option<PathBuf> {
        let Source::File { path, .. } = source else {
            return None;
        };
        let b = cfg.banding();
        let mut params = format!(
            "{}/{}x{}/{:?}/{MINHASH_SEED:x}/{:?}",
            cfg.num_perm, b.bands, b.rows, cfg.shingling, cfg.content
        );
        // Rule 1's keys follow rule 2's (a store of a split made before rule 1 keeps its name).
        if let Some((banding, rule)) = cfg.layout().edits {
            params.push_str(&format!("/{}x{}/{rule:?}", banding.bands, banding.rows));
        }
        let name = format!(
            "{}.{:016x}.sig",
            path.file_name()?.to_string_lossy(),
            xxh3_64(params.as_bytes())
        );
        Some(match dir {
            StoreDir::Beside => path.parent().unwrap_or(Path::new(".")).join(DIR).join(name),
            StoreDir::In(d) => d.join(name),
        })
    }

    /// Opens a store; a missing, truncated or foreign file is an empty store (it is rebuilt).
    pub fn open(path: PathBuf, bands: usize) -> Store {
        let entries = std::fs::read(&path)
            .ok()
            .and_then(|bytes| parse(&bytes, bands))
            .unwrap_or_default();
        Store {
            path,
            bands,
            entries,
            added: HashMap::new(),
        }
    }

    /// The entry of a text, by the xxh3-128 of its raw bytes, as the store held it when opened.
    pub fn get(&self, raw: u128) -> Option<&Entry> {
        self.entries.get(&raw)
    }

    /// Records a newly hashed text.
    pub fn insert(&mut self, raw: u128, entry: Entry) {
        if entry.keys.len() == self.bands && !self.entries.contains_key(&raw) {
            self.added.insert(raw, entry);
        }
    }

    /// Texts it held when opened.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it held none when opened.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes it (atomically) when something was added.
    pub fn save(&self) -> Result<()> {
        if self.added.is_empty() {
            return Ok(());
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| crate::DataError::io(dir, e))?;
        }
        let mut out =
            Vec::with_capacity(20 + (self.entries.len() + self.added.len()) * (36 + 8 * self.bands));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.bands as u32).to_le_bytes());
        let all: HashMap<&u128, &Entry> = self.entries.iter().chain(&self.added).collect();
        out.extend_from_slice(&(all.len() as u64).to_le_bytes());
        let mut raws: Vec<&&u128> = all.keys().collect();
        raws.sort_unstable();
        for raw in raws {
            let e = all[*raw];
            out.extend_from_slice(&raw.to_le_bytes());
            out.extend_from_slice(&e.content.to_le_bytes());
            out.extend_from_slice(&e.words.to_le_bytes());
            for k in &e.keys {
                out.extend_from_slice(&k.to_le_bytes());
            }
        }
        Ok(write_atomic(&self.path, &out)?)
    }
}

/// The entries of a store file, or `None` when it is not one of this layout and banding.
fn parse(bytes: &[u8], bands: usize) -> Option<HashMap<u128, Entry>> {
    let (head, mut rest) = bytes.split_at_checked(20)?;
    if &head[..8] != MAGIC || u32::from_le_bytes(head[8..12].try_into().ok()?) as usize != bands {
        return None;
    }
    let n = u64::from_le_bytes(head[12..20].try_into().ok()?) as usize;
    let size = 36 + 8 * bands;
    if rest.len() != n.checked_mul(size)? {
        return None;
    }
    let mut entries = HashMap::with_capacity(n);
    while !rest.is_empty() {
        let (rec, tail) = rest.split_at(size);
        rest = tail;
        let u128_at = |i: usize| u128::from_le_bytes(rec[i..i + 16].try_into().unwrap_or_default());
        let keys = rec[36..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let words = u32::from_le_bytes(rec[32..36].try_into().ok()?);
        entries.insert(
            u128_at(0),
            Entry {
                content: u128_at(16),
                words,
                keys,
            },
        );
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_round_trips_and_a_damaged_one_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sig");
        let mut s = Store::open(path.clone(), 2);
        let e = Entry {
            content: 7 << 70,
            words: 12,
            keys: vec![1, u64::MAX],
        };
        s.insert(42, e.clone());
        s.save().unwrap();
        let back = Store::open(path.clone(), 2);
        assert_eq!(back.get(42), Some(&e));
        assert!(Store::open(path.clone(), 3).is_empty(), "another banding");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.pop();
        std::fs::write(&path, bytes).unwrap();
        assert!(Store::open(path, 2).is_empty(), "truncated");
    }
}
