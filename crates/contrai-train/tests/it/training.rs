//! The loop's contracts: accumulation equivalence, the run directory, metrics rows, the holdout
//! read once, refusing leaking splits, and learning the demo task.

use crate::common;

use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Device, Tensor};
use common::{Collect, demo_file, tiny_recipe};
use contrai_data::Silent;
use contrai_train::dropout::Dropout;
use contrai_train::model::{Batch, Classifier, TextBatch};
use contrai_train::step::{grad_norm, optimizer, step_grads};
use contrai_train::{Options, TrainError, train};

/// Every parameter's values, flattened, in visiting order.
struct Values(Vec<Vec<f32>>);

impl ModuleVisitor for Values {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        self.0.push(p.val().into_data().try_to_vec::<f32>().unwrap());
    }
}

/// Every parameter's gradient, flattened, in visiting order.
struct Grads<'a>(&'a burn::optim::GradientsParams, Vec<Vec<f32>>);

impl ModuleVisitor for Grads<'_> {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
        let g = self
            .0
            .get::<D>(p.id)
            .map(|g| g.into_data().try_to_vec::<f32>().unwrap());
        self.1.push(g.unwrap_or_default());
    }
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

fn values(m: &Classifier) -> Vec<Vec<f32>> {
    let mut v = Values(Vec::new());
    m.visit(&mut v);
    v.0
}

#[test]
fn eight_times_four_accumulated_equals_one_batch_of_32() {
    let device = Device::flex().autodiff();
    let mut recipe = tiny_recipe(std::path::Path::new("unused"), 1);
    recipe.model.dropout = 0.0;
    let model = Classifier::new(&recipe.model, 2, 0, 3, &device).unwrap();
    let seq = recipe.model.seq_len;
    let ids: Vec<i32> = (0..32 * seq)
        .map(|i| {
            if i % seq < 5 + (i / seq) % 20 {
                ((i * 7919) % 1000 + 2) as i32
            } else {
                0
            }
        })
        .collect();
    let labels: Vec<i32> = (0..32).map(|i| (i % 3 == 0) as i32).collect();

    let whole = [Batch::Text(TextBatch::new(&ids, &labels, seq, &device))];
    let parts: Vec<Batch> = (0..4)
        .map(|k| {
            Batch::Text(TextBatch::new(
                &ids[k * 8 * seq..(k + 1) * 8 * seq],
                &labels[k * 8..(k + 1) * 8],
                seq,
                &device,
            ))
        })
        .collect();
    let (g1, l1) = step_grads(&model, &whole, &[None], false, false);
    let (g4, l4) = step_grads(&model, &parts, &[None; 4], false, false);
    assert!((l1 - l4).abs() < 1e-5, "loss {l1} vs {l4}");
    let (n1, n4) = (grad_norm(&model, &g1), grad_norm(&model, &g4));
    assert!((n1 - n4).abs() < 1e-5 * n1.max(1.0), "grad norm {n1} vs {n4}");

    let (mut v1, mut v4) = (Grads(&g1, Vec::new()), Grads(&g4, Vec::new()));
    model.visit(&mut v1);
    model.visit(&mut v4);
    let gdiff = max_diff(&v1.1, &v4.1);
    let grads1 = v1.1;
    assert!(gdiff < 1e-6, "gradients differ by {gdiff}");

    // AdamW's first update is lr * g / (|g| + eps): for entries whose gradient is itself at the
    // level of f32 rounding (|g| ~ 1e-8) it amplifies the last bit of g into a visible change.
    // That is the optimizer, not accumulation; those entries (|g| < 1e-6) are left out.
    let lr = 1e-3;
    let a = values(&optimizer(&recipe).step(lr, model.clone(), g1));
    let b = values(&optimizer(&recipe).step(lr, model.clone(), g4));
    let (mut worst, mut skipped, mut total) = (0f32, 0usize, 0usize);
    for ((x, y), g) in a.iter().zip(&b).zip(&grads1) {
        for ((p, q), g) in x.iter().zip(y).zip(g) {
            total += 1;
            if g.abs() < 1e-6 && *g != 0.0 {
                skipped += 1;
            } else {
                worst = worst.max((p - q).abs());
            }
        }
    }
    eprintln!(
        "gradients within {gdiff:e}; updates within {worst:e} ({skipped} of {total} near-zero entries left out)"
    );
    assert!(worst < 1e-5, "updated weights differ by {worst}");
    assert!(skipped * 100 < total, "{skipped} of {total} entries left out");
}

#[test]
fn recomputed_blocks_give_the_gradients_of_the_plain_backward() {
    let device = Device::flex().autodiff();
    let mut recipe = tiny_recipe(std::path::Path::new("unused"), 1);
    recipe.model.dropout = 0.2;
    let model = Classifier::new(&recipe.model, 3, 0, 5, &device).unwrap();
    let seq = recipe.model.seq_len;
    let batch = |k: usize| {
        let ids: Vec<i32> = (0..8 * seq)
            .map(|i| {
                if i % seq < 3 + (i / seq + k) % 9 {
                    ((i * 31 + k) % 500 + 2) as i32
                } else {
                    0
                }
            })
            .collect();
        let labels: Vec<i32> = (0..8).map(|i| ((i + k) % 3) as i32).collect();
        Batch::Text(TextBatch::new(&ids, &labels, seq, &device))
    };
    let batches = [batch(0), batch(1)];
    // Dropout masks of two micro-batches, drawn again in the recomputed blocks.
    let drops = [0, 1].map(|m| Some(Dropout::new(0.2, 7, 3, m)));
    let (plain, l1) = step_grads(&model, &batches, &drops, false, false);
    let (recomputed, l2) = step_grads(&model, &batches, &drops, false, true);
    assert!((l1 - l2).abs() <= 1e-6 * l1.abs(), "loss {l1} vs {l2}");
    let (mut a, mut b) = (Grads(&plain, Vec::new()), Grads(&recomputed, Vec::new()));
    model.visit(&mut a);
    model.visit(&mut b);
    assert!(
        a.1.iter().all(|g| !g.is_empty()),
        "every parameter has a gradient"
    );
    assert_eq!(
        a.1.iter().map(Vec::len).collect::<Vec<_>>(),
        b.1.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let scale = a.1.iter().flatten().fold(0f32, |m, g| m.max(g.abs()));
    let diff = max_diff(&a.1, &b.1);
    assert!(
        diff <= 1e-5 * scale,
        "gradients differ by {diff} (largest {scale})"
    );
}

#[test]
fn a_run_leaves_a_complete_directory_and_reads_the_holdout_once() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let log = Collect::default();
    let out = train(&Options::new(tiny_recipe(&data, 20), &run), &Silent, &log).unwrap();
    let eval = out.eval.expect("finished runs evaluate the holdout");
    // After 20 timed steps the run estimates what is left (here: nothing).
    let infos = log.infos.lock().unwrap();
    let pace: Vec<&String> = infos.iter().filter(|l| l.starts_with("pace: ")).collect();
    assert_eq!(pace.len(), 1, "one pace estimate: {infos:?}");
    assert!(
        pace[0].contains(" ms a step on this machine; the 0 planned steps left take about 0 min 00 s"),
        "{}",
        pace[0]
    );
    assert_eq!(eval.holdout_reads, 1);
    assert!(eval.holdout_samples > 0);
    for f in [
        "recipe.toml",
        "plan.json",
        "metrics.jsonl",
        "tokenizer.json",
        "data/manifest.json",
        "final/model.safetensors",
        "final/eval.json",
        "checkpoints/step-00000020/SHA256SUMS",
    ] {
        assert!(run.join(f).is_file(), "{f} missing");
    }
    let resolved = contrai_recipe::Recipe::from_file(&run.join("recipe.toml")).unwrap();
    assert_eq!(resolved, tiny_recipe(&data, 20));

    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let train_keys = [
        "step",
        "phase",
        "samples",
        "train_loss",
        "lr",
        "grad_norm",
        "batch_size",
        "wall_s",
    ];
    let eval_keys = ["step", "phase", "val_loss", "val_accuracy"];
    let (mut trains, mut evals) = (0, 0);
    for r in &rows {
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        if r.get("train_loss").is_some() {
            trains += 1;
            let mut want = train_keys.to_vec();
            want.sort();
            let mut got = keys.clone();
            got.sort();
            assert_eq!(got, want);
            assert_eq!(r["samples"], r["step"].as_u64().unwrap() * 8);
        } else {
            evals += 1;
            let mut want = eval_keys.to_vec();
            want.sort();
            let mut got = keys.clone();
            got.sort();
            assert_eq!(got, want);
        }
    }
    assert_eq!((trains, evals), (20, 4));
    assert!(
        metrics
            .lines()
            .next()
            .unwrap()
            .starts_with("{\"step\":1,\"phase\":\"main\",\"samples\":8,")
    );

    let err = train(
        &Options::new(tiny_recipe(&data, 20), &run),
        &Silent,
        &Collect::default(),
    )
    .unwrap_err();
    assert!(matches!(err, TrainError::Exists { .. }), "{err}");
}

#[test]
fn nothing_reads_the_holdout_before_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut opts = Options::new(tiny_recipe(&data, 20), &run);
    opts.stop_after = Some(8);
    let out = train(&opts, &Silent, &Collect::default()).unwrap();
    assert!(out.eval.is_none());
    // Poison the holdout: training and evaluation go on, only the final read trips over it.
    std::fs::write(run.join("data/holdout.jsonl"), "not json\n").unwrap();
    opts.stop_after = None;
    opts.resume = true;
    let err = train(&opts, &Silent, &Collect::default()).unwrap_err();
    let rows = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert!(
        rows.lines()
            .any(|l| l.starts_with("{\"step\":20,\"phase\":\"main\",\"val_loss\"")),
        "training finished first"
    );
    assert!(err.to_string().contains("holdout"), "{err}");
    // That session began its read: the run's ledger says so, and the next session counts it.
    split_into(&data, &tmp.path().join("fresh"));
    let clean = std::fs::read(tmp.path().join("fresh/holdout.jsonl")).unwrap();
    std::fs::write(run.join("data/holdout.jsonl"), clean).unwrap();
    let log = Collect::default();
    let eval = train(&opts, &Silent, &log).unwrap().eval.unwrap();
    assert_eq!(eval.holdout_reads, 2);
    let warnings = log.warnings.lock().unwrap().join("\n");
    assert!(warnings.contains("the holdout was read 2 times"), "{warnings}");
}

/// The demo file split by `contrai data split`'s library into `dir`, with the tiny recipe's config.
fn split_into(data: &Path, dir: &Path) {
    let cfg = contrai_train::data::split_config(&tiny_recipe(data, 5));
    contrai_data::split::split(
        contrai_data::Source::file(data, None).unwrap(),
        dir,
        &cfg,
        &Silent,
    )
    .unwrap();
}

#[test]
fn a_headerless_tsv_is_read_with_the_recipes_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 200);
    // The same rows as `label<TAB>text` lines, no header, no extension (a TSV field holds no
    // tab: the texts' tabs become spaces, in the JSONL reference too).
    let tsv = tmp.path().join("reviews");
    let (mut lines, mut json) = (String::new(), String::new());
    for l in std::fs::read_to_string(&data).unwrap().lines() {
        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
        let text = v["text"].as_str().unwrap().replace('\t', " ");
        lines.push_str(&format!("{}\t{text}\n", v["label"].as_str().unwrap()));
        v["text"] = text.into();
        json.push_str(&format!("{v}\n"));
    }
    std::fs::write(&tsv, lines).unwrap();
    std::fs::write(&data, json).unwrap();
    let recipe = contrai_recipe::Recipe::parse(
        &format!(
            "[data]\npath = \"{}\"\nformat = \"tsv\"\ncolumns = [\"label\", \"text\"]\n",
            tsv.display()
        ),
        Path::new("tsv.toml"),
    )
    .unwrap();
    let got = contrai_train::data::prepare(
        &recipe,
        &tmp.path().join("a"),
        &Silent,
        contrai_train::data::Reuse::No,
    )
    .unwrap();
    let mut reference = recipe.clone();
    reference.data = contrai_recipe::Recipe::default().data;
    reference.data.path = data.display().to_string();
    let want = contrai_train::data::prepare(
        &reference,
        &tmp.path().join("b"),
        &Silent,
        contrai_train::data::Reuse::No,
    )
    .unwrap();
    let kept = |p: &contrai_train::data::Prepared| p.manifest.partitions.iter().map(|p| p.count).sum::<u64>();
    assert_eq!(kept(&got), kept(&want), "every row read, the first line too");
    assert_eq!(got.manifest.dropped, want.manifest.dropped);
    assert_eq!(got.manifest.format, contrai_data::Format::Tsv);
    assert!(got.train.texts.iter().all(|t| !t.is_empty()) && got.train.labels.iter().all(|l| l != "text"));
}

#[test]
fn an_existing_split_is_copied_into_the_run_and_checked_against_its_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 200);
    let split_dir = tmp.path().join("split");
    split_into(&data, &split_dir);
    let mut recipe = tiny_recipe(&data, 5);
    recipe.data.path = split_dir.display().to_string();
    let run = tmp.path().join("run");
    train(&Options::new(recipe.clone(), &run), &Silent, &Collect::default()).unwrap();
    for f in ["manifest.json", "train.jsonl", "val.jsonl", "holdout.jsonl"] {
        let (a, b) = (split_dir.join(f), run.join("data").join(f));
        assert_eq!(
            std::fs::read(a).unwrap(),
            std::fs::read(b).unwrap(),
            "{f} copied as is"
        );
    }
    // A partition changed after the split is refused, naming the file.
    let val = split_dir.join("val.jsonl");
    let mut bytes = std::fs::read(&val).unwrap();
    bytes.extend_from_slice(b"{\"id\":\"x\",\"text\":\"late\",\"label\":\"positive\"}\n");
    std::fs::write(&val, bytes).unwrap();
    let err = train(
        &Options::new(recipe, tmp.path().join("run2")),
        &Silent,
        &Collect::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("val.jsonl") && err.contains("changed after the split"),
        "{err}"
    );
}

#[test]
fn a_resumed_run_whose_data_changed_is_refused_unless_it_keeps_its_split() {
    use contrai_train::data::{Reuse, prepare};
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 200);
    let split_dir = tmp.path().join("split");
    split_into(&data, &split_dir);
    let mut recipe = tiny_recipe(&data, 5);
    recipe.data.path = split_dir.display().to_string();
    let run = tmp.path().join("run");
    prepare(&recipe, &run, &Silent, Reuse::No).unwrap();
    prepare(&recipe, &run, &Silent, Reuse::Checked).expect("nothing changed");
    // The split directory now holds version 2: the same data and a few new rows.
    let mut grown = std::fs::read_to_string(&data).unwrap();
    grown.push_str("{\"id\":\"late-1\",\"text\":\"a review that came in after the first split was made\",\"label\":\"positive\"}\n");
    let data2 = tmp.path().join("demo-v2.jsonl");
    std::fs::write(&data2, grown).unwrap();
    let v2 = tmp.path().join("split-v2");
    let cfg = contrai_data::split::SplitConfig {
        parent: Some(split_dir.clone()),
        ..contrai_train::data::split_config(&tiny_recipe(&data, 5))
    };
    contrai_data::split::split(
        contrai_data::Source::file(&data2, None).unwrap(),
        &v2,
        &cfg,
        &Silent,
    )
    .unwrap();
    std::fs::remove_dir_all(&split_dir).unwrap();
    std::fs::rename(&v2, &split_dir).unwrap();
    let err = prepare(&recipe, &run, &Silent, Reuse::Checked)
        .unwrap_err()
        .to_string();
    assert!(err.contains("version 2") && err.contains("--keep-split"), "{err}");
    let kept = prepare(&recipe, &run, &Silent, Reuse::Kept).unwrap();
    assert_eq!(kept.manifest.version, 1, "the run's own split");
    // A run that split a data file itself: the file edited since is refused too.
    let run2 = tmp.path().join("run2");
    let on_file = tiny_recipe(&data, 5);
    prepare(&on_file, &run2, &Silent, Reuse::No).unwrap();
    std::fs::copy(&data2, &data).unwrap();
    let err = prepare(&on_file, &run2, &Silent, Reuse::Checked)
        .unwrap_err()
        .to_string();
    assert!(err.contains("changed since the run split it"), "{err}");
}

#[test]
fn a_leaking_split_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 200);
    let split_dir = tmp.path().join("split");
    let recipe = tiny_recipe(&data, 5);
    split_into(&data, &split_dir);
    let mpath = split_dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    m["guard"]["passed"] = false.into();
    m["guard"]["shared_content_hashes"] = 3.into();
    std::fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
    let mut recipe = recipe;
    recipe.data.path = split_dir.display().to_string();
    let err = train(
        &Options::new(recipe, tmp.path().join("run")),
        &Silent,
        &Collect::default(),
    )
    .unwrap_err();
    assert!(matches!(err, TrainError::Leak { shared: 3, .. }), "{err}");
}

#[test]
fn the_tiny_model_learns_the_demo_task() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 1500);
    let mut recipe = tiny_recipe(&data, 400);
    recipe.main.batch = 16;
    recipe.run.eval_every = 50;
    recipe.run.checkpoint_every = 50;
    let out = train(
        &Options::new(recipe, tmp.path().join("run")),
        &Silent,
        &Collect::default(),
    )
    .unwrap();
    let e = out.eval.unwrap();
    eprintln!("tiny model: holdout accuracy {}", e.holdout_accuracy);
    assert!(
        e.holdout_accuracy >= 0.80,
        "holdout accuracy {}",
        e.holdout_accuracy
    );
}
