//! The recipe parser never panics: the default recipe cut anywhere, with bytes flipped, or with
//! any number written in place of a value, is read or refused with an error that names the file.
//! `CONTRAI_FUZZ_CASES` inputs a property (64 by default, what CI runs).

use std::path::Path;

use contrai_recipe::Recipe;
use proptest::prelude::*;

fn check(text: &str) {
    if let Err(e) = Recipe::parse(text, Path::new("fuzz.toml")) {
        assert!(e.to_string().starts_with("fuzz.toml"), "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: contrai_testkit::fuzz_cases(), ..ProptestConfig::default() })]

    #[test]
    fn a_cut_or_corrupted_recipe_is_read_or_refused(cut in any::<usize>(), flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 0..4)) {
        let mut bytes = Recipe::default().to_toml().into_bytes();
        bytes.truncate(cut % (bytes.len() + 1));
        for (at, x) in flips {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] ^= x;
            }
        }
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn any_number_in_place_of_any_value_is_read_or_refused(line in any::<usize>(), value in prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        Just("inf".to_string()), Just("nan".to_string()), Just("-0.0".to_string()),
    ]) {
        let text = Recipe::default().to_toml();
        let lines: Vec<&str> = text.lines().collect();
        let values: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].contains(" = ")).collect();
        let at = values[line % values.len()];
        let key = lines[at].split(" = ").next().unwrap_or("");
        let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        out[at] = format!("{key} = {value}");
        check(&out.join("\n"));
    }
}
