//! Helpers shared by the integration tests: a small demo file, a tiny recipe, a quiet log.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use contrai_data::demo::{DemoConfig, generate};
use contrai_recipe::recipe::Model;
use contrai_recipe::{ModelKind, Phase, Recipe};
use contrai_train::Log;

/// Writes a demo set of `base` reviews as JSONL into `dir`.
pub fn demo_file(dir: &Path, base: usize) -> PathBuf {
    let set = generate(DemoConfig { base, seed: 7 });
    let path = dir.join("demo.jsonl");
    std::fs::write(&path, set.lines.join("\n") + "\n").unwrap();
    path
}

/// A recipe small enough to train in seconds: the main phase alone.
pub fn tiny_recipe(data: &Path, steps: u64) -> Recipe {
    let mut r = Recipe::default();
    r.data.path = data.display().to_string();
    r.model = Model {
        kind: ModelKind::Transformer,
        vocab: 1024,
        seq_len: 32,
        d_model: 32,
        layers: 1,
        heads: 2,
        ffn: 64,
        dropout: 0.1,
        ..Model::default()
    };
    r.main.steps = steps;
    r.main.batch = 8;
    r.main.lr = 2e-3;
    r.main.warmup = 0.1;
    r.run.eval_every = 5;
    r.run.checkpoint_every = 5;
    r.run.keep_last = 2;
    r.run.phases = vec![Phase::Main];
    r
}

/// `r` with all five phases, a validate LR that overfits a tiny model's batch, and a contract batch
/// of half of main's.
pub fn with_all_phases(mut r: Recipe) -> Recipe {
    r.run.phases = Phase::all();
    r.validate.lr = 5e-3;
    r.contract.batch = r.main.batch / 2;
    let d = &mut r.refine.distill;
    (d.steps, d.eval_every, d.d_model, d.ffn, d.batch) = (20, 10, 16, 32, 8);
    r
}

/// Collects messages instead of printing them.
#[derive(Default)]
pub struct Collect {
    /// Warnings, in order.
    pub warnings: Mutex<Vec<String>>,
    /// Progress lines, in order.
    pub infos: Mutex<Vec<String>>,
}

impl Log for Collect {
    fn info(&self, msg: &str) {
        self.infos.lock().unwrap().push(msg.to_string());
    }
    fn warn(&self, msg: &str) {
        self.warnings.lock().unwrap().push(msg.to_string());
    }
}

/// metrics.jsonl with each row's wall-clock field cut out.
pub fn without_wall(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .map(|l| match l.find(",\"wall_s\":") {
            Some(i) => format!("{}}}", &l[..i]),
            None => l.to_string(),
        })
        .collect()
}

/// Reads a run's metrics without wall-clock fields.
pub fn metrics_of(run: &Path) -> Vec<String> {
    without_wall(&std::fs::read_to_string(run.join("metrics.jsonl")).unwrap())
}

/// The header and data of a safetensors file: name → (shape, f32 values).
pub fn safetensors(path: &Path) -> std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header
        .iter()
        .filter(|(name, _)| name.as_str() != "__metadata__")
        .map(|(name, t)| {
            let off = t["data_offsets"].as_array().unwrap();
            let (a, b) = (
                off[0].as_u64().unwrap() as usize,
                off[1].as_u64().unwrap() as usize,
            );
            let shape = t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let data = bytes[8 + n + a..8 + n + b]
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (name.clone(), (shape, data))
        })
        .collect()
}

/// One f32 tensor of a safetensors file.
pub fn safetensor(path: &Path, name: &str) -> Vec<f32> {
    safetensors(path).remove(name).unwrap().1
}

/// (zeros, entries) per block module (`blocks.0.ffn`) of the weight matrices in a safetensors file.
pub fn zero_counts(path: &Path) -> std::collections::BTreeMap<String, (usize, usize)> {
    let mut acc: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for (name, (shape, data)) in safetensors(path) {
        let blocks = name.starts_with("blocks.") || name.starts_with("bert.encoder.");
        if !name.ends_with(".weight") || shape.len() != 2 || !blocks {
            continue;
        }
        let module = contrai_lifecycle::prune_policy::module_of(&name);
        let e = acc.entry(module).or_default();
        *e = (e.0 + data.iter().filter(|w| **w == 0.0).count(), e.1 + data.len());
    }
    acc
}

/// Zero share per block module of the weight matrices in a safetensors file.
pub fn zeros_by_module(path: &Path) -> std::collections::BTreeMap<String, f64> {
    zero_counts(path)
        .into_iter()
        .map(|(m, (z, t))| (m, z as f64 / t as f64))
        .collect()
}

/// The tiny recipe with all five phases.
pub fn lifecycle_recipe(data: &Path, main_steps: u64) -> Recipe {
    let mut r = with_all_phases(tiny_recipe(data, main_steps));
    r.contract.eval_every = 5;
    r
}

/// `r` with contraction forced at main's planned end whatever the tiny run's trajectory: the skip
/// rule (validation still improving at each of the last `stable_checkpoints`) cannot hold.
pub fn forced_contract(mut r: Recipe) -> Recipe {
    r.contract.stable_checkpoints = 1000;
    r
}

/// Rows of a JSONL file.
pub fn rows(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The decisions of a run.
pub fn decisions(run: &Path) -> Vec<serde_json::Value> {
    rows(&run.join("decisions.jsonl"))
}

/// The kinds of a run's decisions, in order.
pub fn kinds(run: &Path) -> Vec<String> {
    decisions(run)
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect()
}

/// The file of `run`'s holdout partition (as its split manifest names it).
pub fn holdout_file(run: &Path) -> PathBuf {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("data/manifest.json")).unwrap()).unwrap();
    let part = m["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "holdout")
        .unwrap();
    run.join("data").join(part["file"].as_str().unwrap())
}

/// `contrai predict` of `variant` on `file`: the rows written and the summary.
pub fn predict(
    run: &Path,
    file: &Path,
    variant: contrai_run::FinalModel,
) -> (
    Vec<contrai_train::predict::Prediction>,
    contrai_train::predict::PredictSummary,
) {
    let p = contrai_train::predict::Predictor::open(run, variant).unwrap();
    let source = contrai_data::Source::file(file, None).unwrap();
    let mut out = Vec::new();
    let summary = p.predict(&source, &mut out, &contrai_data::Silent).unwrap();
    let rows = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (rows, summary)
}

/// Checks that each of `run`'s final models, applied by `contrai predict` to the run's holdout
/// file, scores the holdout accuracy the model card recorded for it, row for row in file order.
pub fn predictions_match_the_card(run: &Path) {
    let card: contrai_run::ModelCard =
        serde_json::from_slice(&std::fs::read(run.join("final/model-card.json")).unwrap()).unwrap();
    let hold = holdout_file(run);
    let ids: Vec<String> = rows(&hold)
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    for v in &card.variants {
        let which: contrai_run::FinalModel = v.name.parse().unwrap();
        let (preds, summary) = predict(run, &hold, which);
        assert_eq!(summary.samples, ids.len());
        assert_eq!(summary.labelled, ids.len());
        let got: Vec<&str> = preds.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(got, ids, "{which}: rows in file order");
        let acc = summary.accuracy.unwrap();
        assert!(
            (acc - f64::from(v.holdout_accuracy)).abs() < 1e-6,
            "{which}: predict {acc} vs the card's {}",
            v.holdout_accuracy
        );
        for p in &preds {
            let sum: f32 = p.probabilities.values().sum();
            assert!((sum - 1.0).abs() < 1e-4, "{which}: {p:?}");
            let top = p.probabilities.iter().max_by(|a, b| a.1.total_cmp(b.1)).unwrap();
            assert_eq!(top.0, &p.label);
            assert!(p.given.is_some());
        }
    }
}

/// The tiny random BERT checkpoint `contrai-bert`'s tests hold (made by
/// `scripts/fixtures/tiny_bert.py`).
pub fn tiny_bert_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrai-bert/tests/fixtures/tiny-bert")
}

/// [`tiny_recipe`] fine-tuning the tiny BERT (mean pooling, 24 tokens), with the pretrained
/// defaults' prune rules, at LRs that move a random 2-layer encoder.
pub fn bert_recipe(data: &Path, steps: u64) -> Recipe {
    let mut r = tiny_recipe(data, steps);
    r.model.kind = ModelKind::Bert;
    r.model.pretrained = Some(tiny_bert_dir().display().to_string());
    r.model.pooling = Some(contrai_recipe::Pooling::Mean);
    r.model.seq_len = 24;
    r.main.lr = 1e-3;
    r.contract.prune = ["attention.self_attn", "intermediate.dense", "output.dense"]
        .iter()
        .map(|m| contrai_recipe::recipe::Prune {
            params: format!("bert.encoder.layer.*.{m}.*"),
            init: 0.1,
            final_sparsity: 0.3,
        })
        .collect();
    r
}
