//! Bad input: every problem named with file, line and field; nothing panics; nothing half-written.

use std::path::{Path, PathBuf};

use contrai_data::split::{SplitConfig, split};
use contrai_data::{Audit, AuditConfig, DataError, FieldSpec, Silent, Source};
use proptest::prelude::*;

fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn audit(path: &Path, skip_bad: bool) -> Result<Audit, DataError> {
    let cfg = AuditConfig {
        skip_bad,
        ..AuditConfig::default()
    };
    Audit::run(vec![Source::file(path, None)?], cfg, &Silent)
}

const GOOD: &str = r#"{"id": 1, "text": "the first review of a kettle", "label": "positive"}"#;

#[test]
fn a_malformed_jsonl_line_is_named_and_can_be_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!("{GOOD}\n\n{{\"id\": 2, \"text\": \"broken\n{GOOD}\n[1, 2]\n");
    let p = file(dir.path(), "mail.jsonl", body.as_bytes());
    let err = audit(&p, false).unwrap_err().to_string();
    assert!(err.contains("mail.jsonl:3: invalid JSON"), "{err}");
    let a = audit(&p, true).unwrap();
    assert_eq!(a.index.bad_rows.len(), 2);
    assert!(
        a.index.bad_rows[1].reason.contains(":5: expected a JSON object"),
        "{:?}",
        a.index.bad_rows
    );
    assert_eq!(a.index.samples.len(), 2);
}

#[test]
fn a_missing_text_field_lists_the_fields_found() {
    let dir = tempfile::tempdir().unwrap();
    let p = file(
        dir.path(),
        "x.jsonl",
        br#"{"id": 1, "body": "hello", "subject": "s"}"#,
    );
    let err = audit(&p, false).unwrap_err().to_string();
    assert!(
        err.contains("no text field `text`") && err.contains("body, id, subject"),
        "{err}"
    );
    let cfg = AuditConfig {
        fields: FieldSpec {
            text: "body".into(),
            label: Some("category".into()),
            explicit: true,
            ..FieldSpec::default()
        },
        ..AuditConfig::default()
    };
    let err = Audit::run(vec![Source::file(&p, None).unwrap()], cfg, &Silent)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no label field `category`"), "{err}");
}

#[test]
fn rows_without_text_are_counted_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!("{GOOD}\n{{\"id\": 2, \"text\": null}}\n{{\"id\": 3}}\n");
    let a = audit(&file(dir.path(), "x.jsonl", body.as_bytes()), false).unwrap();
    assert_eq!(a.index.missing_text.len(), 2);
    assert_eq!(a.report().missing_text.count, 2);
    let body = format!("{GOOD}\n{{\"id\": 2, \"text\": \"no label here at all\"}}\n");
    let r = audit(&file(dir.path(), "y.jsonl", body.as_bytes()), false)
        .unwrap()
        .report();
    assert_eq!(r.missing_label, vec!["2".to_string()]);
    assert!(
        r.problems.iter().any(|p| p == "1 samples have no label"),
        "{:?}",
        r.problems
    );
}

#[test]
fn a_text_field_of_the_wrong_type_names_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!("{GOOD}\n{{\"id\": 2, \"text\": [\"a\"]}}\n");
    let err = audit(&file(dir.path(), "x.jsonl", body.as_bytes()), false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "x.jsonl:2: field `text` (text) must be a string (or an array of numbers), found an array"
        ),
        "{err}"
    );
}

#[test]
fn empty_non_utf8_directory_and_unknown_inputs_have_their_own_messages() {
    let dir = tempfile::tempdir().unwrap();
    let empty = file(dir.path(), "e.jsonl", b"");
    assert!(matches!(audit(&empty, false), Err(DataError::Empty { .. })));
    let blank = file(dir.path(), "b.jsonl", b"\n  \n");
    assert!(matches!(audit(&blank, false), Err(DataError::Empty { .. })));
    let latin1 = file(dir.path(), "l.jsonl", b"{\"text\": \"caf\xe9\"}\n");
    let err = audit(&latin1, false).unwrap_err().to_string();
    assert!(err.contains("l.jsonl:1: not valid UTF-8"), "{err}");
    let sub = dir.path().join("sub.jsonl");
    std::fs::create_dir(&sub).unwrap();
    assert!(matches!(audit(&sub, false), Err(DataError::IsDirectory { .. })));
    let odd = file(dir.path(), "data.xlsx", b"x");
    assert!(matches!(
        Source::file(&odd, None),
        Err(DataError::UnknownFormat { .. })
    ));
    let missing = dir.path().join("nope.jsonl");
    assert!(
        audit(&missing, false)
            .unwrap_err()
            .to_string()
            .contains("nope.jsonl")
    );
}

#[test]
fn csv_rows_of_the_wrong_width_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = file(
        dir.path(),
        "d.csv",
        b"id,text,label\n1,hello there,ham\n2,oops\n3,\"quoted, text\",spam\n",
    );
    let err = audit(&p, false).unwrap_err().to_string();
    assert!(
        err.contains("d.csv:3: the row has 2 fields, the header has 3"),
        "{err}"
    );
    let a = audit(&p, true).unwrap();
    assert_eq!((a.index.samples.len(), a.index.bad_rows.len()), (2, 1));
    assert_eq!(a.index.samples[1].id, "3");
    let header_only = file(dir.path(), "h.csv", b"id,text\n");
    assert!(matches!(audit(&header_only, false), Err(DataError::Empty { .. })));
    let bad = file(dir.path(), "u.csv", b"text\nok\n\xff\xfe\n");
    assert!(
        audit(&bad, false)
            .unwrap_err()
            .to_string()
            .contains("u.csv:3: field 1 is not valid UTF-8")
    );
}

/// 400 rows; row 200 (line 201) opens a quote it never closes.
fn unclosed_quote_csv() -> String {
    let mut csv = String::from("id,text,label\n");
    for i in 1..=400 {
        if i == 200 {
            csv.push_str("200,\"a review whose quote never closes,ham\n");
        } else {
            csv.push_str(&format!("{i},review number {i} of a kettle that works,ham\n"));
        }
    }
    csv
}

#[test]
fn an_unclosed_quote_is_named_at_its_line_and_swallows_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let p = file(dir.path(), "q.csv", unclosed_quote_csv().as_bytes());
    let err = audit(&p, false).unwrap_err().to_string();
    assert!(
        err.contains("q.csv:201:") && err.contains("runs to the end of the file"),
        "{err}"
    );
    let a = audit(&p, true).unwrap();
    assert_eq!((a.index.samples.len(), a.index.bad_rows.len()), (399, 1));
    assert!(
        a.index.bad_rows[0].reason.contains(":201:"),
        "{:?}",
        a.index.bad_rows
    );
    let ids: Vec<&str> = a.index.samples.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids[198..201], ["199", "201", "202"]);
    assert_eq!(
        a.index.samples[399 - 1].line,
        401,
        "lines counted through the resumed read"
    );
    assert!(
        a.index.samples.iter().all(|s| s.snippet.len() < 60),
        "no row holds another"
    );
    // A split with --skip-bad writes the 399 rows; without it, nothing.
    let out = dir.path().join("split");
    let cfg = SplitConfig {
        audit: AuditConfig {
            skip_bad: true,
            ..AuditConfig::default()
        },
        ..SplitConfig::default()
    };
    let m = split(Source::file(&p, None).unwrap(), &out, &cfg, &Silent)
        .unwrap()
        .manifest;
    assert_eq!(m.partitions.iter().map(|x| x.count).sum::<u64>(), 399);
    assert_eq!(m.dropped["bad_rows"], 1);
    let refused = dir.path().join("refused");
    assert!(
        split(
            Source::file(&p, None).unwrap(),
            &refused,
            &SplitConfig::default(),
            &Silent
        )
        .is_err()
    );
    assert!(!refused.exists(), "a failed split leaves no folder");
}

#[test]
fn a_quoted_field_past_the_line_limit_is_a_broken_quote() {
    let dir = tempfile::tempdir().unwrap();
    // Row 10 opens a quote that row 60's stray quote "closes": 50 rows would be one field.
    let mut csv = String::from("id,text,label\n");
    for i in 1..=100 {
        match i {
            10 => csv.push_str("10,\"opens here,ham\n"),
            60 => csv.push_str("60,closes\" here,ham\n"),
            _ => csv.push_str(&format!("{i},row {i},ham\n")),
        }
    }
    let p = file(dir.path(), "l.csv", csv.as_bytes());
    let limited = |lines| {
        let limit = contrai_data::read::QuotedField {
            lines,
            bytes: 1 << 20,
        };
        let cfg = AuditConfig {
            skip_bad: true,
            ..AuditConfig::default()
        };
        Audit::run(
            vec![Source::file(&p, None).unwrap().quoted_field(limit)],
            cfg,
            &Silent,
        )
        .unwrap()
    };
    // Within the default limit the quote is taken as closed (a real multi-line field could be).
    assert_eq!(limited(1000).index.samples.len(), 50);
    let a = limited(20);
    assert_eq!((a.index.samples.len(), a.index.bad_rows.len()), (99, 1));
    assert!(
        a.index.bad_rows[0].reason.contains(":11:") && a.index.bad_rows[0].reason.contains("past 20 lines")
    );
}

#[test]
fn a_file_that_is_not_parquet_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = file(dir.path(), "x.parquet", b"PAR1 but not really");
    let err = audit(&p, false).unwrap_err().to_string();
    assert!(err.contains("x.parquet: not a readable Parquet file"), "{err}");
}

#[test]
fn a_failed_split_leaves_the_output_directory_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("train.jsonl"), "precious\n").unwrap();
    let body = format!("{GOOD}\nnot json\n");
    let p = file(dir.path(), "x.jsonl", body.as_bytes());
    assert!(
        split(
            Source::file(&p, None).unwrap(),
            &out,
            &SplitConfig::default(),
            &Silent
        )
        .is_err()
    );
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["train.jsonl"], "no temporary file left behind");
    assert_eq!(
        std::fs::read_to_string(out.join("train.jsonl")).unwrap(),
        "precious\n"
    );
}

fn corrupt(base: &[u8], cut: usize, flips: &[(usize, u8)]) -> Vec<u8> {
    let mut b = base[..cut.min(base.len())].to_vec();
    for &(i, v) in flips {
        if !b.is_empty() {
            let n = b.len();
            b[i % n] = v;
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Truncated or corrupted JSONL and CSV never panic: they read, or fail with a message.
    #[test]
    fn corrupted_files_never_panic(cut in 0usize..400, flips in proptest::collection::vec((0usize..400, any::<u8>()), 0..6), skip in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = format!("{GOOD}\n{{\"id\":\"b\",\"text\":\"another one, with \\\"quotes\\\" and ünïcode\",\"label\":0}}\n{GOOD}\n");
        let csv = "id,text,label\n1,\"a, b\",x\n2,plain text here,y\n3,\"multi\nline\",x\n";
        for (name, base) in [("p.jsonl", jsonl.as_bytes()), ("p.csv", csv.as_bytes())] {
            let p = file(dir.path(), name, &corrupt(base, cut, &flips));
            match audit(&p, skip) {
                Ok(a) => { let _ = a.report().to_string(); }
                Err(e) => prop_assert!(e.to_string().contains(name), "{e}"),
            }
        }
    }
}
