//! Numeric features held in a sample's text field (an MLP's input): a JSON array of numbers
//! (`[0.3, 1, -2.5]`) or numbers separated by commas, semicolons or spaces (`"0.3 1 -2.5"`).
//! Two samples are the same when their vectors are equal, however the numbers were written.

use xxhash_rust::xxh3::xxh3_128;

/// The numbers in one sample's feature text.
pub fn parse(text: &str) -> Result<Vec<f32>, String> {
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| match t.parse::<f32>() {
            Ok(v) if v.is_finite() => Ok(v),
            Ok(_) => Err(format!("`{t}` is not finite")),
            Err(_) => Err(format!("`{t}` is not a number")),
        })
        .collect()
}

/// A hash of the vector's values (`-0` counted as `0`): equal vectors, equal hashes.
pub fn content_hash(values: &[f32]) -> u128 {
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|&v| (v + 0.0).to_bits().to_le_bytes())
        .collect();
    xxh3_128(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_vectors_hash_equal_however_written() {
        let h = |t: &str| content_hash(&parse(t).unwrap());
        assert_eq!(h("[0, 1.5, -2]"), h("0 1.50 -2.0"));
        assert_eq!(h("[-0, 3]"), h("0;3"));
        assert_ne!(h("[0, 1.5, -2]"), h("[0, 1.5, 2]"));
        assert_ne!(h("[1, 2]"), h("[1, 2, 0]"));
    }

    #[test]
    fn bad_numbers_are_named() {
        assert_eq!(parse("[1, x]").unwrap_err(), "`x` is not a number");
        assert_eq!(parse("1 inf").unwrap_err(), "`inf` is not finite");
        assert!(parse("[]").unwrap().is_empty());
    }
}
