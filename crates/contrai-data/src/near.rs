//! What a near-copy is: the one definition that the audit, the split and its guard, the
//! decontamination and the sharded audit verify every candidate pair against.
//!
//! Two normalised texts (NFKC, case-folded, whitespace collapsed) are near-copies when either
//!
//! 1. **a few words changed**: the longer has at least [`EditRule::min_words`] words (8) and one
//!    becomes the other by replacing, inserting or deleting at most
//!    `max(1, ⌊share × words⌋)` words of the longer one (`share` 5 %: one word for texts of 8–39
//!    words, two for 40–59, one more every 20 words); or
//! 2. **most shingles shared**: the Jaccard similarity of their shingle sets (word 5-grams;
//!    character 5-grams for texts under 20 words) reaches the threshold (0.8) — a longer block
//!    changed, moved or appended in a long text.
//!
//! Rule 1 is what keeps short texts honest: one changed word in a 20-word review leaves only half
//! of its word 5-grams, so Jaccard alone let such pairs through.

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

use crate::text::{Shingling, overlap, word_hashes};

/// The lowest shingle Jaccard similarity of two texts within their edit budget and long enough
/// for two edits or more (word 5-grams: ≈ 0.56 at 40 and 60 words, where the budget steps up;
/// → 0.6 as texts grow): rule 1's MinHash bands are chosen so that such a pair shares …
pub const EDIT_JACCARD: f64 = 0.56;
/// … [`EDIT_BANDS_AGREEING`] of them with at least this probability (256 permutations: 64 bands
/// of 4 rows, 0.989 at 0.56, 0.9985 at 0.6) …
pub const EDIT_RECALL: f64 = 0.985;
/// … where a pair sharing one band only is not a candidate: on templated text (reviews made of
/// shared sentences) one band in 64 agrees by chance for one random pair in ~2,000, two for one
/// in ~10⁵.
pub const EDIT_BANDS_AGREEING: usize = 2;

/// Rule 1: texts that differ by a few whole words.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EditRule {
    /// Words that may change, as a share of the longer text's words (at least one).
    pub share: f64,
    /// The longer text needs this many words: below it, one word is too much of a text.
    pub min_words: u32,
}

impl Default for EditRule {
    fn default() -> Self {
        EditRule {
            share: 0.05,
            min_words: 8,
        }
    }
}

impl EditRule {
    /// Word edits allowed between two texts whose longer has `words` words (0 below the minimum).
    pub fn budget(&self, words: usize) -> usize {
        if words < self.min_words as usize {
            return 0;
        }
        // The small epsilon keeps 40 × 0.05 at 2 despite binary fractions.
        ((words as f64 * self.share + 1e-9).floor() as usize).max(1)
    }

    /// The first length whose budget exceeds one word: pairs whose longer text is shorter have
    /// their one edit found by [`one_edit_keys`], longer ones by MinHash.
    pub fn one_edit_limit(&self) -> usize {
        let mut n = self.min_words.max(1) as usize;
        while self.budget(n) <= 1 && n < 1 << 20 {
            n += 1;
        }
        n
    }

    /// The shortest text that can pair with a text of [`Self::one_edit_limit`] words or more.
    pub fn many_edits_from(&self) -> usize {
        let limit = self.one_edit_limit();
        limit - self.budget(limit)
    }

    /// The rule in words, as reports print it.
    pub fn describe(rule: Option<&EditRule>) -> String {
        match rule {
            Some(r) => format!(
                "or words changed, inserted or deleted up to {} % of the longer text (at least one, from {} words)",
                r.share * 100.0,
                r.min_words
            ),
            None => "no word-edit rule (a split made before it)".into(),
        }
    }

    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.share >= 0.0 && self.share < 0.5) {
            return Err(format!("edit share {} is not in [0, 0.5)", self.share));
        }
        if self.min_words < 2 {
            return Err(format!("edit rule's min_words {} is below 2", self.min_words));
        }
        Ok(())
    }
}

/// What verification needs of a text: its words (hashed, in order) and its shingle set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fingerprint {
    /// xxh3-64 of each word of the normalised text, in order.
    pub words: Vec<u64>,
    /// Its shingle hashes, sorted and deduplicated once [`Self::settled`].
    pub shingles: Vec<u64>,
}

impl Fingerprint {
    /// The fingerprint of a normalised text.
    pub fn of(normalized: &str, shingling: &Shingling) -> Fingerprint {
        Fingerprint::unsettled(normalized, shingling).settled()
    }

    /// A fingerprint whose shingles are still in text order with repeats (what signing needs);
    /// [`Self::settled`] before it is judged.
    pub fn unsettled(normalized: &str, shingling: &Shingling) -> Fingerprint {
        let words = word_hashes(normalized);
        Fingerprint {
            shingles: shingling.unsorted_shingles(normalized, &words),
            words,
        }
    }

    /// Its shingles sorted and deduplicated, as [`NearCopy::judge`] reads them.
    pub fn settled(mut self) -> Fingerprint {
        self.shingles.sort_unstable();
        self.shingles.dedup();
        self
    }

    /// Hashes held (what a cache of fingerprints pays for).
    pub fn len(&self) -> usize {
        self.words.len() + self.shingles.len()
    }

    /// Whether it holds nothing (an empty text).
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// The definition: Jaccard threshold (rule 2), how shingles are cut, and, unless a split made
/// before it existed is being continued, the edit rule (rule 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NearCopy {
    /// Rule 2's threshold.
    pub threshold: f64,
    /// Rule 2's shingles (rule 1 uses their size to skip pairs too far apart to align).
    pub shingling: Shingling,
    /// Rule 1.
    pub edits: Option<EditRule>,
}

/// Why two texts are near-copies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Match {
    /// Rule 2: this share of their shingles in common (Jaccard similarity).
    Shingles(f64),
    /// Rule 1: this many words changed; and their shingles' Jaccard similarity.
    Edits(u32, f64),
}

impl Match {
    /// The Jaccard similarity of their shingles, whichever rule held.
    pub fn jaccard(&self) -> f64 {
        match *self {
            Match::Shingles(j) | Match::Edits(_, j) => j,
        }
    }
}

impl NearCopy {
    /// Whether `a` and `b` (settled fingerprints) are near-copies, and why (rule 2 first: it is
    /// the cheaper to check).
    pub fn judge(&self, a: &Fingerprint, b: &Fingerprint) -> Option<Match> {
        let (shared, jaccard) = overlap(&a.shingles, &b.shingles);
        if jaccard >= self.threshold {
            return Some(Match::Shingles(jaccard));
        }
        let rule = self.edits?;
        let budget = rule.budget(a.words.len().max(b.words.len()));
        // An edit takes at most one word n-gram's worth of shingles from either text: more lost
        // than that, and no alignment within the budget exists.
        let short = self.shingling.short_text_words;
        if a.words.len().min(b.words.len()) >= short {
            let reach = self.shingling.word_ngram * budget;
            if a.shingles.len() - shared > reach || b.shingles.len() - shared > reach {
                return None;
            }
        }
        let d = word_edits_within(&a.words, &b.words, budget)?;
        Some(Match::Edits(d as u32, jaccard))
    }
}

/// The word-level edit distance of `a` and `b` (replacements, insertions, deletions) when it is at
/// most `k`, else `None`; `k = 0` never matches (equal texts are exact duplicates, not near-copies).
/// Ukkonen's band: O(k × length).
pub fn word_edits_within(a: &[u64], b: &[u64], k: usize) -> Option<usize> {
    if k == 0 || a.len().abs_diff(b.len()) > k {
        return None;
    }
    let start = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[start..], &b[start..]);
    let end = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[..a.len() - end], &b[..b.len() - end]);
    if a.is_empty() || b.is_empty() {
        return Some(a.len().max(b.len()));
    }
    // Row i holds D[i][j] for j in i-k..=i+k, at index j + k - i; outside the band is "too far".
    let far = k + 1;
    let width = 2 * k + 1;
    let mut prev = vec![far; width];
    let mut row = vec![far; width];
    for j in 0..=k.min(b.len()) {
        prev[j + k] = j;
    }
    for i in 1..=a.len() {
        let mut best = far;
        for d in 0..width {
            // Column j = i + d - k; outside 0..=b.len() it is no cell.
            let j = (i + d).wrapping_sub(k);
            let v = if i + d < k || j > b.len() {
                far
            } else if j == 0 {
                i
            } else {
                let diagonal = prev[d] + usize::from(a[i - 1] != b[j - 1]);
                let up = if d + 1 < width { prev[d + 1] + 1 } else { far };
                let left = if d > 0 { row[d - 1] + 1 } else { far };
                diagonal.min(up).min(left)
            };
            row[d] = v.min(far);
            best = best.min(row[d]);
        }
        if best > k {
            return None;
        }
        std::mem::swap(&mut prev, &mut row);
    }
    let d = prev[b.len() + k - a.len()];
    (d <= k).then_some(d)
}

/// Rule 1's candidates for one-word budgets, found without chance: a text of `n` words and one
/// that is one edit away share, for `L` = the shorter one's length, either their first `⌊L/2⌋`
/// words or their last `L − ⌊L/2⌋ − 1` (the edit lies in one half). Each text gives those keys for
/// `L = n − 1` and `L = n` when a pair of that shorter length has a one-word budget; 0 elsewhere.
pub fn one_edit_keys(words: &[u64], rule: &EditRule) -> [u64; 4] {
    let mut keys = [0u64; 4];
    let n = words.len();
    let limit = rule.one_edit_limit();
    for (slot, short) in [n.saturating_sub(1), n].into_iter().enumerate() {
        // Pairs with the shorter text at `short` words have a longer one of `short` or `short + 1`.
        if short == 0 || short + 1 < rule.min_words as usize || short >= limit {
            continue;
        }
        let head = short / 2;
        let tail = short - head - 1;
        keys[2 * slot] = side_key(b'P', short, &words[..head]);
        keys[2 * slot + 1] = side_key(b'S', short, &words[n - tail..]);
    }
    keys
}

/// One side's key: which side, the shorter length, and the words' hashes.
fn side_key(side: u8, short: usize, words: &[u64]) -> u64 {
    let mut bytes = Vec::with_capacity(5 + 8 * words.len());
    bytes.push(side);
    bytes.extend_from_slice(&(short as u32).to_le_bytes());
    for w in words {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    // Never 0, which marks an unused key.
    xxh3_64(&bytes).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::normalize;

    fn words(s: &str) -> Vec<u64> {
        word_hashes(&normalize(s))
    }

    #[test]
    fn budgets_follow_the_longer_text() {
        let r = EditRule::default();
        assert_eq!(r.budget(7), 0);
        assert_eq!(
            (
                r.budget(8),
                r.budget(39),
                r.budget(40),
                r.budget(59),
                r.budget(60)
            ),
            (1, 1, 2, 2, 3)
        );
        assert_eq!(r.budget(400), 20);
        assert_eq!((r.one_edit_limit(), r.many_edits_from()), (40, 38));
    }

    #[test]
    fn one_changed_word_is_a_near_copy_at_eight_words_not_at_seven() {
        let sh = Shingling::default();
        let rule = NearCopy {
            threshold: 0.8,
            shingling: sh,
            edits: Some(EditRule::default()),
        };
        let fp = |s: &str| Fingerprint::of(&normalize(s), &sh);
        let a = fp("the delivery was late and the box was crushed");
        let b = fp("the delivery was late and the box was dented");
        assert!(matches!(rule.judge(&a, &b), Some(Match::Edits(1, _))));
        let c = fp("the delivery came late and the box was dented");
        assert!(rule.judge(&a, &c).is_none(), "two of nine words");
        let seven = (
            fp("i love this little coffee grinder so"),
            fp("i hate this little coffee grinder so"),
        );
        assert!(!matches!(rule.judge(&seven.0, &seven.1), Some(Match::Edits(..))));
    }

    #[test]
    fn one_edit_pairs_share_a_key() {
        let rule = EditRule::default();
        let base = "one two three four five six seven eight nine ten eleven twelve";
        let variants = [
            "one two three four five six seven eight nine ten eleven dozen",
            "uno two three four five six seven eight nine ten eleven twelve",
            "one two three four five six extra seven eight nine ten eleven twelve",
            "one two three four five six eight nine ten eleven twelve",
            "zero one two three four five six seven eight nine ten eleven twelve",
        ];
        let k = one_edit_keys(&words(base), &rule);
        for v in variants {
            let kv = one_edit_keys(&words(v), &rule);
            assert!(k.iter().any(|x| *x != 0 && kv.contains(x)), "{v}");
        }
        let far = one_edit_keys(&words("one two three four five six seven"), &rule);
        assert!(!k.iter().any(|x| *x != 0 && far.contains(x)));
        // Texts too short for rule 1 and too long for one-word budgets have no keys.
        assert_eq!(one_edit_keys(&words("a b c d e f"), &rule), [0; 4]);
        assert_eq!(one_edit_keys(&vec![7; 45], &rule), [0; 4]);
    }
}
