//! Text normalisation, content hashes and shingles: what "the same text" means.

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

/// NFKC, case-folded, whitespace collapsed to single spaces and trimmed.
pub fn normalize(text: &str) -> String {
    if text.is_ascii() {
        return normalize_ascii(text.as_bytes());
    }
    // Most other text is already NFKC: skip the composition pass for it.
    let composed;
    let text = if is_nfkc_quick(text.chars()) == IsNormalized::Yes {
        text
    } else {
        composed = text.nfkc().collect::<String>();
        &composed
    };
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        if word.is_ascii() {
            out.extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase())));
        } else {
            out.extend(word.chars().flat_map(char::to_lowercase));
        }
    }
    out
}

/// [`normalize`] for ASCII: one pass over the bytes (ASCII is its own NFKC form).
fn normalize_ascii(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut space = false;
    for &b in bytes {
        // Unicode White_Space within ASCII: tab, line feed, vertical tab, form feed, CR, space.
        if matches!(b, 9..=13 | b' ') {
            space = !out.is_empty();
        } else {
            if space {
                out.push(b' ');
                space = false;
            }
            out.push(b.to_ascii_lowercase());
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The stable content hash (xxh3-128) of already normalised text.
pub fn content_hash(normalized: &str) -> u128 {
    xxh3_128(normalized.as_bytes())
}

/// A content hash as 32 lowercase hex digits.
pub fn hash_hex(hash: u128) -> String {
    format!("{hash:032x}")
}

/// How texts are cut into shingles.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Shingling {
    /// Words per shingle for ordinary texts.
    pub word_ngram: usize,
    /// Characters per shingle for short texts.
    pub char_ngram: usize,
    /// Texts with fewer words than this use character shingles.
    pub short_text_words: usize,
}

impl Default for Shingling {
    fn default() -> Self {
        Shingling {
            word_ngram: 5,
            char_ngram: 5,
            short_text_words: 20,
        }
    }
}

impl Shingling {
    /// The sorted, deduplicated 64-bit hashes of a normalised text's shingles.
    pub fn shingles(&self, normalized: &str) -> Vec<u64> {
        self.shingles_of(normalized, &word_hashes(normalized))
    }

    /// [`Self::shingles`] from the text's [`word_hashes`] (a word n-gram is a hash of its words'
    /// hashes, so the words are hashed once for both).
    pub fn shingles_of(&self, normalized: &str, words: &[u64]) -> Vec<u64> {
        let mut out = self.unsorted_shingles(normalized, words);
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The shingle hashes in text order, repeats kept: all MinHash needs (a minimum ignores
    /// repeats), without the sort that only the exact Jaccard similarity needs.
    pub fn unsorted_shingles(&self, normalized: &str, words: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        if words.is_empty() {
            return out;
        }
        if words.len() >= self.short_text_words {
            let n = self.word_ngram.max(1).min(words.len());
            out.extend(words.windows(n).map(gram_hash));
        } else {
            let n = self.char_ngram.max(1);
            let bounds: Vec<usize> = normalized
                .char_indices()
                .map(|(i, _)| i)
                .chain([normalized.len()])
                .collect();
            let chars = bounds.len() - 1;
            if chars <= n {
                out.push(xxh3_64(normalized.as_bytes()));
            } else {
                for k in 0..=chars - n {
                    out.push(xxh3_64(&normalized.as_bytes()[bounds[k]..bounds[k + n]]));
                }
            }
        }
        out
    }
}

/// A 64-bit hash of each word of a normalised text (words are separated by single spaces), in
/// order.
pub fn word_hashes(normalized: &str) -> Vec<u64> {
    let bytes = normalized.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() / 5 + 1);
    if bytes.is_empty() {
        return out;
    }
    let mut start = 0;
    for space in memchr::memchr_iter(b' ', bytes) {
        out.push(word_hash(&bytes[start..space]));
        start = space + 1;
    }
    out.push(word_hash(&bytes[start..]));
    out
}

/// One word's hash: its bytes eight at a time, each multiplied in, then avalanched (words are
/// short, and a general-purpose hash spends most of its time on set-up for them).
#[inline]
fn word_hash(word: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = 0x27d4_eb2f_1656_67c5 ^ (word.len() as u64).wrapping_mul(K);
    let mut rest = word;
    while rest.len() >= 8 {
        let (head, tail) = rest.split_at(8);
        let mut v = [0u8; 8];
        v.copy_from_slice(head);
        h = (h ^ u64::from_le_bytes(v)).wrapping_mul(K).rotate_left(27);
        rest = tail;
    }
    if !rest.is_empty() {
        let mut v = [0u8; 8];
        v[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(v)).wrapping_mul(K).rotate_left(27);
    }
    fmix64(h)
}

/// One hash of a run of word hashes, which depends on their order: each word's hash rotated by
/// its place (independent operations, which the CPU runs side by side), then mixed once.
fn gram_hash(words: &[u64]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15 ^ words.len() as u64;
    for &w in words {
        h = (h ^ w).wrapping_mul(0xbf58_476d_1ce4_e5b9).rotate_left(31);
    }
    fmix64(h)
}

/// MurmurHash3's 64-bit finaliser: a bijection with full avalanche.
pub(crate) fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The number of words of a normalised text.
pub fn word_count(normalized: &str) -> usize {
    if normalized.is_empty() {
        0
    } else {
        normalized.bytes().filter(|&b| b == b' ').count() + 1
    }
}

/// Each run of `n` words of a normalised text: its xxh3-64 and its byte range. In normalised
/// text words are separated by exactly one space, so an n-gram is a slice. None when the text
/// has fewer than `n` words.
pub fn word_grams(normalized: &str, n: usize) -> impl Iterator<Item = (u64, std::ops::Range<usize>)> + '_ {
    let starts: Vec<usize> = if normalized.is_empty() {
        Vec::new()
    } else {
        std::iter::once(0)
            .chain(
                normalized
                    .bytes()
                    .enumerate()
                    .filter(|&(_, b)| b == b' ')
                    .map(|(i, _)| i + 1),
            )
            .collect()
    };
    let n = n.max(1);
    let windows = (starts.len() + 1).saturating_sub(n);
    (0..windows).map(move |k| {
        // End (exclusive) of the window's last word.
        let end = starts.get(k + n).map_or(normalized.len(), |&s| s - 1);
        let range = starts[k]..end;
        (xxh3_64(&normalized.as_bytes()[range.clone()]), range)
    })
}

/// Exact Jaccard similarity of two sorted, deduplicated hash sets.
pub fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    overlap(a, b).1
}

/// How many values two sorted, deduplicated sets share, and their Jaccard similarity (1 for
/// two empty sets).
pub fn overlap(a: &[u64], b: &[u64]) -> (usize, f64) {
    let inter = shared(a, b);
    let union = a.len() + b.len() - inter;
    (
        inter,
        if union == 0 {
            1.0
        } else {
            inter as f64 / union as f64
        },
    )
}

/// The number of values two sorted, deduplicated sets share.
fn shared(a: &[u64], b: &[u64]) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                n += 1;
                i += 1;
                j += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_width_case_and_space() {
        assert_eq!(normalize("  Ｈello\tWORLD \n ﬁne "), "hello world fine");
        assert_eq!(normalize(""), "");
        assert_eq!(normalize(" A\x0b b\r\n\tC "), "a b c");
        let ascii = "Mixed CASE\t text\x0c with\u{a0}no-break";
        assert_eq!(normalize(ascii), "mixed case text with no-break");
    }

    #[test]
    fn word_shingles_are_runs_of_five_words() {
        let s = Shingling::default();
        let text = normalize(&(0..25).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "));
        let sh = s.shingles(&text);
        assert_eq!(sh.len(), 21);
        let first = gram_hash(&word_hashes("w0 w1 w2 w3 w4"));
        assert!(sh.contains(&first));
        assert!(sh.contains(&gram_hash(&word_hashes("w20 w21 w22 w23 w24"))));
        assert_ne!(first, gram_hash(&word_hashes("w1 w0 w2 w3 w4")), "order counts");
    }

    #[test]
    fn short_texts_use_character_shingles() {
        let s = Shingling::default();
        assert_eq!(s.shingles("abcdef").len(), 2);
        assert_eq!(s.shingles("abc").len(), 1);
        assert!(s.shingles("").is_empty());
    }

    #[test]
    fn jaccard_counts_the_overlap() {
        assert_eq!(jaccard(&[1, 2, 3], &[2, 3, 4]), 0.5);
        assert_eq!(jaccard(&[1], &[2]), 0.0);
    }
}
