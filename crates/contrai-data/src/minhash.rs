//! MinHash signatures and LSH banding: cheap candidates for near-duplicate pairs.

use crate::near::EditRule;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A family of `num_perm` hash functions over 32-bit shingle keys, each a permutation of the
/// 32-bit integers: `h_i(x) = fmix32(x ⊕ s_i)`, MurmurHash3's bijective finaliser.
///
/// 32-bit lanes let the inner loop run eight functions an instruction with AVX2 (chosen at run
/// time); the estimate's error matches the theoretical √(J(1−J)/k) (see the tests).
#[derive(Debug, Clone)]
pub struct MinHasher {
    seeds: Vec<u32>,
}

impl MinHasher {
    /// Draws the family from a fixed seed, so signatures are the same on every run and machine.
    pub fn new(num_perm: usize, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        MinHasher {
            seeds: (0..num_perm).map(|_| rng.random::<u32>()).collect(),
        }
    }

    /// The number of hash functions.
    pub fn num_perm(&self) -> usize {
        self.seeds.len()
    }

    /// The signature of a shingle set: for each function, the minimum over the shingles.
    pub fn signature(&self, shingles: &[u64]) -> Vec<u32> {
        let mut sig = vec![u32::MAX; self.seeds.len()];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { min_into_avx2(&mut sig, &self.seeds, shingles) };
            return sig;
        }
        min_into(&mut sig, &self.seeds, shingles);
        sig
    }
}

/// MurmurHash3's 32-bit finaliser: a bijection with full avalanche.
#[inline(always)]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// Folds each shingle into the running minima.
#[inline(always)]
fn min_into(sig: &mut [u32], seeds: &[u32], shingles: &[u64]) {
    for &h in shingles {
        // Verification uses the full 64-bit hashes; collisions of the fold inside one text are rare.
        let x = (h ^ (h >> 32)) as u32;
        for (s, &seed) in sig.iter_mut().zip(seeds) {
            *s = (*s).min(fmix32(x ^ seed));
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn min_into_avx2(sig: &mut [u32], seeds: &[u32], shingles: &[u64]) {
    min_into(sig, seeds, shingles);
}

/// An LSH banding: `bands` bands of `rows` signature values each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Banding {
    /// Number of bands.
    pub bands: usize,
    /// Signature values per band.
    pub rows: usize,
}

impl Banding {
    /// The probability that a pair of Jaccard similarity `s` shares at least one band.
    pub fn candidate_probability(&self, s: f64) -> f64 {
        1.0 - (1.0 - s.powi(self.rows as i32)).powi(self.bands as i32)
    }

    /// The probability that a pair of Jaccard similarity `s` shares at least `agreeing` bands.
    pub fn agreeing_probability(&self, s: f64, agreeing: usize) -> f64 {
        let p = s.powi(self.rows as i32);
        // 1 − P(fewer than `agreeing`), the binomial terms built one from the last.
        let mut term = (1.0 - p).powi(self.bands as i32);
        let mut below = 0.0;
        for k in 0..agreeing.min(self.bands + 1) {
            below += term;
            term *= (self.bands - k) as f64 / (k + 1) as f64 * p / (1.0 - p).max(f64::MIN_POSITIVE);
        }
        (1.0 - below).clamp(0.0, 1.0)
    }

    /// The most selective banding in which a pair at `threshold` shares at least `agreeing`
    /// bands with probability at least `recall`.
    pub fn for_recall_agreeing(num_perm: usize, threshold: f64, recall: f64, agreeing: usize) -> Banding {
        (1..=num_perm)
            .rev()
            .map(|rows| Banding {
                bands: num_perm / rows,
                rows,
            })
            .find(|b| b.agreeing_probability(threshold, agreeing) >= recall)
            .unwrap_or(Banding {
                bands: num_perm,
                rows: 1,
            })
    }

    /// The most selective banding (most rows a band) that still finds a pair at `threshold`
    /// with probability at least `recall`.
    ///
    /// The usual "optimal" banding balances false positives and negatives, which finds a pair
    /// right at the threshold with P ≈ 0.45; since every candidate is verified exactly, false
    /// positives only cost time, and recall is what matters.
    pub fn for_recall(num_perm: usize, threshold: f64, recall: f64) -> Banding {
        (1..=num_perm)
            .rev()
            .map(|rows| Banding {
                bands: num_perm / rows,
                rows,
            })
            .find(|b| b.candidate_probability(threshold) >= recall)
            .unwrap_or(Banding {
                bands: num_perm,
                rows: 1,
            })
    }

    /// One 64-bit key a band: equal keys mean equal bands (up to negligible collisions); never 0,
    /// which marks a key a text does not have.
    pub fn keys(&self, signature: &[u32]) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.bands);
        self.keys_into(signature, &mut out);
        out
    }

    /// [`Self::keys`], appended to `out`.
    pub fn keys_into(&self, signature: &[u32], out: &mut Vec<u64>) {
        out.extend(signature.chunks_exact(self.rows).take(self.bands).map(band_key));
    }
}

/// One band's key: a hash of its values in order, never 0.
fn band_key(values: &[u32]) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3 ^ values.len() as u64;
    for &v in values {
        h = (h ^ u64::from(v))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    crate::text::fmix64(h).max(1)
}

/// Where each of a text's candidate keys comes from, and which keys are compared with which.
///
/// A text's keys are, in order: rule 2's bands (MinHash of its shingles, rows chosen for the
/// Jaccard threshold); rule 1's bands (the same signature in bands of fewer rows, for texts long
/// enough that several words may change); rule 1's four exact keys for one-word budgets
/// ([`crate::near::one_edit_keys`]). Keys are compared within a band; the four exact keys form one
/// group, as a text's key for one shorter length meets another text's key for its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyLayout {
    /// Rule 2's banding.
    pub jaccard: Banding,
    /// Rule 1: its banding for several-word budgets, and the rule.
    pub edits: Option<(Banding, EditRule)>,
}

/// The exact keys a text has under rule 1.
pub const EXACT_KEYS: usize = 4;

impl KeyLayout {
    /// Keys a text has.
    pub fn len(&self) -> usize {
        self.jaccard.bands + self.edits.map_or(0, |(b, _)| b.bands + EXACT_KEYS)
    }

    /// Whether a text has no keys (never: rule 2 has at least one band).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The groups of slots whose keys are compared with each other, each with the rule that
    /// bounds its pairs' lengths: rule 1's bands pair only texts within their edit budget, and a
    /// pair is a candidate when [`crate::near::EDIT_BANDS_AGREEING`] of them agree (or any other key does).
    pub fn groups(&self) -> Vec<(Vec<usize>, Option<EditRule>)> {
        let mut out: Vec<(Vec<usize>, Option<EditRule>)> =
            (0..self.jaccard.bands).map(|b| (vec![b], None)).collect();
        if let Some((banding, rule)) = self.edits {
            let start = self.jaccard.bands;
            out.extend((start..start + banding.bands).map(|b| (vec![b], Some(rule))));
            let exact = start + banding.bands;
            out.push(((exact..exact + EXACT_KEYS).collect(), None));
        }
        out
    }

    /// The group of each slot (its index in [`Self::groups`]).
    pub fn group_of_slots(&self) -> Vec<usize> {
        let mut of = vec![0; self.len()];
        for (g, (slots, _)) in self.groups().iter().enumerate() {
            for &s in slots {
                of[s] = g;
            }
        }
        of
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xxhash_rust::xxh3::xxh3_64;

    #[test]
    fn banding_for_recall_matches_the_documented_choice() {
        let b = Banding::for_recall(256, 0.8, 0.85);
        assert_eq!(b, Banding { bands: 23, rows: 11 });
        assert!((b.candidate_probability(0.8) - 0.873).abs() < 0.005);
        // The default since rule 1: a pair at the threshold is found 997 times in 1,000.
        let b = Banding::for_recall(256, 0.8, 0.99);
        assert_eq!(b, Banding { bands: 32, rows: 8 });
        assert!((b.candidate_probability(0.8) - 0.997).abs() < 0.001);
    }

    #[test]
    fn agreeing_bands_are_binomial() {
        let b = Banding { bands: 64, rows: 4 };
        assert!((b.agreeing_probability(0.56, 1) - b.candidate_probability(0.56)).abs() < 1e-12);
        let p: f64 = 0.56f64.powi(4);
        let two = 1.0 - (1.0 - p).powi(64) - 64.0 * p * (1.0 - p).powi(63);
        assert!((b.agreeing_probability(0.56, 2) - two).abs() < 1e-12);
        assert_eq!(Banding::for_recall_agreeing(256, 0.56, 0.985, 2), b);
    }

    #[test]
    fn signatures_estimate_jaccard() {
        let m = MinHasher::new(256, 7);
        let a: Vec<u64> = (0..1000).map(|i| xxh3_64(&(i as u64).to_le_bytes())).collect();
        let b: Vec<u64> = (500..1500).map(|i| xxh3_64(&(i as u64).to_le_bytes())).collect();
        let (sa, sb) = (m.signature(&a), m.signature(&b));
        let est = sa.iter().zip(&sb).filter(|(x, y)| x == y).count() as f64 / 256.0;
        assert!((est - 1.0 / 3.0).abs() < 0.09, "estimate {est}");
        assert_eq!(m.signature(&a), sa, "deterministic");
    }
}
