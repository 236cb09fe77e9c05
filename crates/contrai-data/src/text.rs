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
        let mut out = Vec::new();
        if normalized.is_empty() {
            return out;
        }
        let words = word_count(normalized);
        if words >= self.short_text_words {
            let n = self.word_ngram.max(1);
            if words <= n {
                out.push(xxh3_64(normalized.as_bytes()));
            } else {
                out.extend(word_grams(normalized, n).map(|(h, _)| h));
            }
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
        out.sort_unstable();
        out.dedup();
        out
    }
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
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut inter) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter as f64 / (a.len() + b.len() - inter) as f64
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
    fn word_shingles_are_slices_of_five_words() {
        let s = Shingling::default();
        let text = normalize(&(0..25).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "));
        let sh = s.shingles(&text);
        assert_eq!(sh.len(), 21);
        assert!(sh.contains(&xxh3_64(b"w0 w1 w2 w3 w4")));
        assert!(sh.contains(&xxh3_64(b"w20 w21 w22 w23 w24")));
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
