//! `contrai check`: each finding a recipe can have, planted; none on the default recipe; the exit
//! status (0 without an error finding, 1 with one, 2 for a recipe that cannot be read).

use crate::util;

use serde_json::Value;
use util::{TINY_BERT, TempDir, contrai};

/// The default recipe with `edits` (whole `key = value` lines) put in place of the default lines
/// of the same keys under the same section, written to `dir`.
fn planted(dir: &TempDir, name: &str, edits: &[(&str, &str)]) -> std::path::PathBuf {
    let init = contrai(["recipe", "init"]).output();
    init.assert_success();
    let mut text = init.stdout_utf8().to_string();
    for (section, line) in edits {
        let key = line.split('=').next().unwrap().trim();
        let start = text
            .find(&format!("[{section}]"))
            .unwrap_or_else(|| panic!("no [{section}]"));
        let at = start
            + text[start..]
                .find(&format!("\n{key} "))
                .unwrap_or_else(|| panic!("no {key}"))
            + 1;
        let end = at + text[at..].find('\n').unwrap();
        text.replace_range(at..end, line);
    }
    dir.write(name, text)
}

/// `contrai check --json` on `recipe`: its exit code and its findings' kinds and severities.
fn check(recipe: &std::path::Path) -> (i32, Vec<(String, String)>, Value) {
    let out = contrai(["check", "--json"]).arg(recipe).output();
    let json = out.json();
    let kinds = json["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings array\n{out}"))
        .iter()
        .map(|f| {
            let s = |k: &str| {
                f[k].as_str()
                    .unwrap_or_else(|| panic!("no {k}\n{out}"))
                    .to_string()
            };
            assert!(s("message").ends_with('.'), "one sentence: {f}");
            (s("kind"), s("severity"))
        })
        .collect();
    (out.code().expect("exited"), kinds, json)
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(k, s)| (k.to_string(), s.to_string()))
        .collect()
}

#[test]
fn the_default_recipe_is_within_the_rules() {
    let dir = TempDir::new();
    let recipe = planted(&dir, "default.toml", &[]);
    let (code, kinds, _) = check(&recipe);
    assert_eq!((code, kinds), (0, vec![]));
    contrai(["check"])
        .arg(&recipe)
        .output()
        .assert_success()
        .assert_stdout_contains(&["within the rules (no finding)"]);
}

/// A planted recipe: what it plants, its edits, the finding it must give and a part of its fix.
type Case = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
    &'static str,
);

#[test]
fn each_schedule_and_batch_finding_on_its_planted_recipe() {
    let dir = TempDir::new();
    let cases: [Case; 5] = [
        (
            "long warmup",
            &[("main", "warmup = 0.1")],
            "warmup_outside_range",
            "main.warmup = 0.03",
        ),
        (
            "no warmup",
            &[("main", "warmup = 0.0")],
            "warmup_outside_range",
            "main.warmup = 0.03",
        ),
        (
            "linear",
            &[("main", "schedule = \"linear\"")],
            "decay_not_cosine",
            "main.schedule = \"cosine\"",
        ),
        (
            "small batch",
            &[("main", "batch = 8")],
            "effective_batch_outside_range",
            "main.accumulate = 4",
        ),
        (
            "checkpoints",
            &[("run", "checkpoint_every = 500")],
            "sparse_checkpoints",
            "run.checkpoint_every = 50",
        ),
    ];
    for (i, (what, edits, kind, fix)) in cases.into_iter().enumerate() {
        let recipe = planted(&dir, &format!("r{i}.toml"), edits);
        let (code, kinds, json) = check(&recipe);
        assert_eq!((code, kinds), (0, pairs(&[(kind, "warning")])), "{what}: {json}");
        let message = json["findings"][0]["message"].as_str().unwrap();
        assert!(message.contains(fix), "{what}: {message}");
    }
}

#[test]
fn the_seed_articles_lora_job_is_one_error_and_exits_1() {
    let dir = TempDir::new();
    let text = format!(
        "[model]\nkind = \"bert\"\npretrained = \"{TINY_BERT}\"\n[model.lora]\n[main]\nlr = 2e-4\nwarmup = 0.1\nschedule = \"linear\"\n"
    );
    let recipe = dir.write("article.toml", text);
    let (code, kinds, json) = check(&recipe);
    assert_eq!(
        (code, kinds),
        (1, pairs(&[("seed_article_failure", "error")])),
        "{json}"
    );
    let f = &json["findings"][0];
    assert_eq!(f["evidence"]["peak_lr"], 2e-4);
    assert_eq!(f["evidence"]["warmup_share"], 0.1);
    // The same schedule without LoRA is two warnings, not the article's failure.
    let full = dir.write(
        "full.toml",
        format!("[model]\nkind = \"bert\"\npretrained = \"{TINY_BERT}\"\n[main]\nlr = 2e-4\nwarmup = 0.1\nschedule = \"linear\"\n"),
    );
    let (code, kinds, _) = check(&full);
    assert_eq!(
        (code, kinds),
        (
            0,
            pairs(&[
                ("warmup_outside_range", "warning"),
                ("decay_not_cosine", "warning")
            ])
        )
    );
    contrai(["check"])
        .arg(&recipe)
        .output()
        .assert_code(1)
        .assert_stdout_contains(&[
            "error: seed_article_failure: LoRA at LR 2e-4",
            "1 finding (1 error)",
        ]);
}

#[test]
fn a_split_directory_without_holdout_or_validation_is_found() {
    let dir = TempDir::new();
    for (ratios, expected, code) in [
        ("0.9,0.1,0", vec![("no_holdout", "warning")], 0),
        (
            "1,0,0",
            vec![("no_eval_split", "error"), ("no_holdout", "warning")],
            1,
        ),
        ("0.85,0.1,0.05", vec![], 0),
    ] {
        let split = dir.join(format!("split-{ratios}"));
        contrai(["data", "split", "--demo", "--ratios", ratios, "--out"])
            .arg(&split)
            .output()
            .assert_success();
        let path = split.display().to_string();
        let recipe = planted(
            &dir,
            &format!("{ratios}.toml"),
            &[("data", &format!("path = \"{path}\""))],
        );
        let (got, kinds, json) = check(&recipe);
        assert_eq!((got, kinds), (code, pairs(&expected)), "{ratios}: {json}");
    }
}

#[test]
fn a_bad_recipe_exits_2_naming_the_file_line_and_key() {
    let dir = TempDir::new();
    let recipe = dir.write("bad.toml", "[main]\nsteps = 400\nwarmup = 0.7\n");
    contrai(["check"])
        .arg(&recipe)
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["bad.toml:3", "main.warmup"]);
    contrai(["check"])
        .arg(dir.join("missing.toml"))
        .output()
        .assert_code(2)
        .assert_stderr_contains(&["missing.toml"]);
}

#[test]
fn help_teaches_the_findings_the_exit_status_and_an_example() {
    contrai(["check", "--help"])
        .output()
        .assert_success()
        .assert_stdout_contains(&[
            "Exit status: 0 when no finding is an error",
            "Example: contrai check spam.toml    or    contrai check spam.toml --json",
            "--json",
        ]);
}

/// `contrai --version` names the version and the commit it was built from (build.rs): a release's
/// archive and wheel are told apart by it.
#[test]
fn version_names_the_commit() {
    let out = contrai(["--version"]).output();
    out.assert_success();
    let text = out.stdout_utf8();
    let rest = text
        .strip_prefix(concat!("contrai ", env!("CARGO_PKG_VERSION"), " ("))
        .and_then(|r| r.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("not `contrai <version> (<commit>)`: {text:?}"));
    let commit = rest.strip_suffix("-dirty").unwrap_or(rest);
    // A checkout names its commit; a copy without .git (an unpacked sdist) says so.
    let hex = commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit());
    assert!(hex || commit == "unknown", "{text:?}");
}
