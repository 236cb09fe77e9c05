//! Files as users have them: TSV (with double quotes in texts, with or without a header row),
//! files without an extension, and numeric feature vectors; and a split that leaves out much of
//! the data says so.

use std::path::{Path, PathBuf};

use contrai_data::split::{SplitConfig, split};
use contrai_data::{Audit, AuditConfig, Content, DataError, FieldSpec, Format, IndexConfig, Silent, Source};

/// SMS-like messages: ham and spam, some with double quotes, apostrophes and commas, as the
/// public SMS corpora ship them (`label<TAB>text`).
fn messages(n: usize) -> Vec<(String, String)> {
    let ham = [
        "Go until the point, crazy.. Available only in bugis n great world la e buffet",
        "Wake up..! \"Sweet\" \"morning\" to you, have a nice day",
        "I'm gonna be home soon and i don't want to talk about this stuff anymore tonight, k?",
        "Ok lar... Joking wif u oni... \"see you\" at 5",
        "He said \"no\" and left; I said \"fine\" and stayed",
    ];
    let spam = [
        "WINNER!! As a valued network customer you have been selected to receive a prize reward",
        "Free entry in 2 a wkly comp to win FA Cup final tkts 21st May. Text \"FA\" to 87121",
        "URGENT! Your mobile number has been awarded a \"bonus\" prize, call 09061701461",
    ];
    let words = [
        "call", "later", "home", "now", "free", "text", "reply", "tonight", "love", "work", "meet", "cash",
        "week", "phone", "sorry", "pick", "dinner", "claim", "box", "train", "late", "film", "tell", "mum",
        "soon", "stop", "win", "class", "sleep", "yes", "need", "room", "car",
    ];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut pick = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        words[(x % words.len() as u64) as usize]
    };
    (0..n)
        .map(|i| {
            let (label, base) = match i % 3 {
                0 => ("spam", spam[i % spam.len()]),
                _ => ("ham", ham[i % ham.len()]),
            };
            // Every message its own: ten words drawn at random after a common start.
            let tail: Vec<&str> = (0..10).map(|_| pick()).collect();
            (label.to_string(), format!("{base} {}", tail.join(" ")))
        })
        .collect()
}

fn write_tsv(path: &Path, rows: &[(String, String)], header: bool) {
    let mut s = String::new();
    if header {
        s.push_str("label\ttext\n");
    }
    for (l, t) in rows {
        s.push_str(&format!("{l}\t{t}\n"));
    }
    std::fs::write(path, s).unwrap();
}

fn fields() -> FieldSpec {
    FieldSpec {
        text: "text".into(),
        label: Some("label".into()),
        id: None,
        explicit: true,
    }
}

fn config() -> SplitConfig {
    SplitConfig {
        audit: AuditConfig {
            fields: fields(),
            ..AuditConfig::default()
        },
        ..SplitConfig::default()
    }
}

/// Data rows of a written partition (header line aside).
fn data_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().skip(1).map(str::to_string).collect()
}

#[test]
fn a_tsv_file_splits_into_tsv_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("mail.tsv");
    let rows = messages(300);
    write_tsv(&input, &rows, true);
    let out = dir.path().join("d");
    let m = split(Source::file(&input, None).unwrap(), &out, &config(), &Silent)
        .unwrap()
        .manifest;
    assert_eq!(m.format, Format::Tsv);
    assert!(m.guard.passed);
    let total: u64 = m.partitions.iter().map(|p| p.count).sum();
    assert_eq!(total, 300, "every distinct message kept");
    let train = out.join("train.tsv");
    assert_eq!(
        std::fs::read_to_string(&train).unwrap().lines().next(),
        Some("label\ttext")
    );
    // Rows are written back as they were: no quoting added around quotes.
    let written: Vec<String> = ["train", "val", "holdout"]
        .iter()
        .flat_map(|p| data_lines(&out.join(format!("{p}.tsv"))))
        .collect();
    assert!(
        written.iter().any(|l| l.contains("\"Sweet\" \"morning\"")),
        "{:?}",
        &written[..3]
    );
    let mut sorted = written.clone();
    sorted.sort();
    let mut original: Vec<String> = rows.iter().map(|(l, t)| format!("{l}\t{t}")).collect();
    original.sort();
    assert_eq!(sorted, original);
}

#[test]
fn double_quotes_in_tsv_texts_lose_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("sms.tsv");
    let rows = messages(120);
    write_tsv(&input, &rows, true);
    let audit = Audit::run(vec![Source::file(&input, None).unwrap()], config().audit, &Silent).unwrap();
    let report = audit.report();
    assert_eq!(report.rows, 120, "one row a line");
    assert_eq!(report.samples, 120);
    assert!(report.exact.groups == 0, "{:?}", report.problems);
    let sweet = audit
        .index
        .samples
        .iter()
        .find(|s| s.snippet.contains("Sweet"))
        .expect("the quoted text is read");
    assert!(
        sweet.snippet.contains("Wake up..! \"Sweet\" \"morning\" to you"),
        "{}",
        sweet.snippet
    );
}

#[test]
fn a_headerless_file_is_read_with_the_columns_given() {
    let dir = tempfile::tempdir().unwrap();
    // No header, no extension: the form public corpora often ship in.
    let input = dir.path().join("SMSSpamCollection");
    write_tsv(&input, &messages(90), false);
    let err = Source::file(&input, None).unwrap_err().to_string();
    assert!(
        err.contains("SMSSpamCollection")
            && err.contains("without an extension")
            && err.contains("jsonl, csv, tsv or parquet"),
        "{err}"
    );
    let tsv: Format = "tsv".parse().unwrap();
    let columns = ["label".to_string(), "text".to_string()];
    let source = Source::file(&input, Some(tsv))
        .unwrap()
        .headerless(&columns)
        .unwrap();
    let out = dir.path().join("d");
    let m = split(source, &out, &config(), &Silent).unwrap().manifest;
    assert_eq!(
        m.partitions.iter().map(|p| p.count).sum::<u64>(),
        90,
        "the first line is data"
    );
    // The partitions carry a header of the names given, so they read on their own.
    let train = out.join("train.tsv");
    assert_eq!(
        std::fs::read_to_string(&train).unwrap().lines().next(),
        Some("label\ttext")
    );
    let back = Audit::run(vec![Source::file(&train, None).unwrap()], config().audit, &Silent).unwrap();
    assert_eq!(back.index.samples.len() as u64, m.partitions[0].count);

    // A row with another number of fields is named by its line.
    let bad = dir.path().join("bad.tsv");
    std::fs::write(&bad, "ham\tfine\nspam\tone\textra\n").unwrap();
    let source = Source::file(&bad, None).unwrap().headerless(&columns).unwrap();
    let err = Audit::run(vec![source], config().audit, &Silent)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.tsv:2") && err.contains("3 fields") && err.contains("label, text"),
        "{err}"
    );
    // Column names apply to delimited files only, and each name once.
    let jsonl = dir.path().join("x.jsonl");
    std::fs::write(&jsonl, "{\"text\": \"a\"}\n").unwrap();
    assert!(Source::file(&jsonl, None).unwrap().headerless(&columns).is_err());
    let twice = ["text".to_string(), "text".to_string()];
    let err = Source::file(&bad, None).unwrap().headerless(&twice).unwrap_err();
    assert!(err.to_string().contains("`text` is named twice"), "{err}");
}

/// Digits-like feature vectors: 10 classes, 64 integers 0–16 each (prototype + noise), as JSONL
/// arrays; `dups` exact copies (same label) and `conflicts` exact copies with another label.
fn digits(path: &Path, n: usize, dups: usize, conflicts: usize) -> PathBuf {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let protos: Vec<Vec<i64>> = (0..10)
        .map(|_| (0..64).map(|_| (next() % 17) as i64).collect())
        .collect();
    let mut lines = Vec::new();
    let mut vectors = Vec::new();
    for i in 0..n {
        let c = i % 10;
        let v: Vec<i64> = protos[c]
            .iter()
            .map(|&p| (p + (next() % 7) as i64 - 3).clamp(0, 16))
            .collect();
        vectors.push((v, c));
    }
    for i in 0..dups {
        vectors.push(vectors[i * 3].clone());
    }
    for i in 0..conflicts {
        let (v, c) = vectors[100 + i * 5].clone(); // apart from the copies above
        vectors.push((v, (c + 1) % 10));
    }
    for (i, (v, c)) in vectors.iter().enumerate() {
        let arr: Vec<String> = v.iter().map(i64::to_string).collect();
        lines.push(format!(
            "{{\"id\": \"d{i}\", \"x\": [{}], \"label\": \"{c}\"}}",
            arr.join(", ")
        ));
    }
    let p = path.join("digits.jsonl");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

#[test]
fn numeric_features_are_duplicates_only_when_equal() {
    let dir = tempfile::tempdir().unwrap();
    let data = digits(dir.path(), 1797, 12, 5);
    let mut cfg = config();
    cfg.audit.fields.text = "x".into();
    cfg.audit.index = IndexConfig {
        content: Content::Numeric,
        ..IndexConfig::default()
    };
    let audit = Audit::run(
        vec![Source::file(&data, None).unwrap()],
        cfg.audit.clone(),
        &Silent,
    )
    .unwrap();
    let r = audit.report();
    assert_eq!(r.samples, 1797 + 12 + 5);
    assert_eq!(
        r.exact.groups,
        12 + 5,
        "the planted copies, nothing else: {:?}",
        r.problems
    );
    assert_eq!(r.near.clusters, 0);
    assert_eq!(r.conflicts.clusters, 5);
    assert!(
        r.empty.near_empty.is_empty() && r.length.outliers.is_empty(),
        "no text checks"
    );
    assert!(!format!("{r}").contains("near-empty"));
    let m = split(
        Source::file(&data, None).unwrap(),
        &dir.path().join("d"),
        &cfg,
        &Silent,
    )
    .unwrap()
    .manifest;
    assert_eq!(m.dropped["conflict"], 10, "both sides of each planted conflict");
    assert_eq!(m.dropped["duplicate"], 12);
    assert_eq!(m.heavy_drop(), None, "1 % dropped is not loud");

    // The same vectors read as text: shingles of compact JSON make clusters of different digits.
    let mut text = cfg.clone();
    text.audit.index.content = Content::Text;
    let m = split(
        Source::file(&data, None).unwrap(),
        &dir.path().join("t"),
        &text,
        &Silent,
    )
    .unwrap()
    .manifest;
    let left: u64 = m.dropped.values().sum();
    if left * 20 > 1814 {
        let w = m.heavy_drop().expect("a loud warning");
        assert!(w.contains(&format!("leaves out {left} of the 1814")), "{w}");
    }

    // A feature value that is not a number is a row error naming the file, line and field.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"x\": [1, 2], \"label\": \"a\"}\n{\"x\": \"1 two\", \"label\": \"b\"}\n",
    )
    .unwrap();
    let err = Audit::run(
        vec![Source::file(&bad, None).unwrap()],
        cfg.audit.clone(),
        &Silent,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("bad.jsonl:2") && err.contains("field `x`") && err.contains("`two` is not a number"),
        "{err}"
    );
}

#[test]
fn a_split_that_leaves_out_much_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("mail.tsv");
    let mut rows = messages(100);
    // 20 copies of messages with the other label: ten clusters in conflict.
    for i in 0..10 {
        let (l, t) = rows[i].clone();
        let other = if l == "ham" { "spam" } else { "ham" };
        rows.push((other.into(), t.clone()));
        rows.push((l, t));
    }
    write_tsv(&input, &rows, true);
    let m = split(
        Source::file(&input, None).unwrap(),
        &dir.path().join("d"),
        &config(),
        &Silent,
    )
    .unwrap()
    .manifest;
    let w = m.heavy_drop().expect("30 of 120 left out");
    assert!(
        w.contains("leaves out 30 of the 120 samples read (25 %)")
            && w.contains("30 in duplicate clusters whose labels disagree (on_label_conflict = drop)"),
        "{w}"
    );
}

#[test]
fn formats_are_named_and_detected() {
    assert_eq!("tsv".parse::<Format>(), Ok(Format::Tsv));
    let err = "xls".parse::<Format>().unwrap_err();
    assert!(err.contains("jsonl, csv, tsv or parquet"), "{err}");
    assert!(matches!(
        Source::file("a.tab", None),
        Ok(Source::File {
            format: Format::Tsv,
            ..
        })
    ));
    let err = Source::file("data.xlsx", None).unwrap_err();
    assert!(matches!(err, DataError::UnknownFormat { .. }));
    assert!(err.to_string().contains("the extension `.xlsx`"), "{err}");
}
