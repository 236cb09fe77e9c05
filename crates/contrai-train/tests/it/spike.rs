//! Spike triage in the Burn engine: a numeric MLP run with planted rows whose noise features are
//! scaled by 1e4. Each spikes when its batch is drawn; the conductor rolls back to the last
//! checkpoint, the engine passes over the batch when the replay reaches its step, and
//! `quarantine.jsonl` names the rows; when a planted row spikes again in a later epoch it leaves
//! the training set.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::{Collect, kinds, rows};
use contrai_data::Silent;
use contrai_recipe::Recipe;
use contrai_run::{QuarantineEntry, QuarantineLog, RunDir, SpikeCause};
use contrai_train::{Options, train};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` samples of 8 features (5 that set the class, two noise at a large scale, one constant);
/// the rows `planted` (ids `bad<i>`) have the last three multiplied by 1e4.
fn planted_file(dir: &Path, n: usize, planted: &[usize]) -> PathBuf {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let lines: Vec<String> = (0..n)
        .map(|i| {
            let mut x: Vec<f64> = (0..5).map(|_| rng.random::<f64>() * 2.0 - 1.0).collect();
            x.extend([rng.random::<f64>() * 1000.0, rng.random::<f64>() * -50.0, 3.0]);
            let s = x[0] * x[1] * 4.0 + x[2];
            let label = ["low", "mid", "high"][usize::from(s >= -0.4) + usize::from(s >= 0.4)];
            let id = match planted.iter().position(|p| *p == i) {
                Some(k) => {
                    x[5..].iter_mut().for_each(|v| *v *= 1e4);
                    format!("bad{k}")
                }
                None => format!("n{i}"),
            };
            let v: Vec<String> = x.iter().map(|v| format!("{v:.4}")).collect();
            format!(
                "{{\"id\": \"{id}\", \"x\": [{}], \"label\": \"{label}\"}}",
                v.join(", ")
            )
        })
        .collect();
    let path = dir.join("planted.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// Main alone on micro-batches of 8, long enough for every training row to be drawn twice.
fn recipe(data: &Path) -> Recipe {
    let text = format!(
        "[run]\nname = \"spike\"\nphases = [\"main\"]\neval_every = 50\ncheckpoint_every = 50\n\
         [data]\npath = \"{}\"\ntext = \"x\"\n\
         [model]\nkind = \"mlp\"\nlayers = 2\nffn = 64\n\
         [main]\nsteps = 1300\nbatch = 8\nlr = 3e-3\n\
         [refine]\nquantize = \"none\"\n[refine.distill]\nenabled = false\n",
        data.display()
    );
    Recipe::parse(&text, Path::new("spike.toml")).unwrap()
}

/// The planted ids the split put in the train partition.
fn planted_in_train(run: &Path) -> BTreeSet<String> {
    rows(&run.join("data/train.jsonl"))
        .into_iter()
        .filter_map(|r| r["id"].as_str().map(str::to_string))
        .filter(|id| id.starts_with("bad"))
        .collect()
}

/// The sample ids of an entry's rows that left the training set.
fn left_ids(e: &QuarantineEntry) -> Vec<String> {
    let by_row: BTreeMap<u64, &String> = e.rows.iter().copied().zip(&e.ids).collect();
    e.left.iter().map(|r| by_row[r].clone()).collect()
}

#[test]
fn a_planted_bad_batch_spikes_is_quarantined_and_its_rows_leave() {
    let dir = tempfile::tempdir().unwrap();
    let data = planted_file(dir.path(), 6000, &[100, 1100, 2100, 3100, 4100, 5100]);
    let run = dir.path().join("run");
    let out = train(&Options::new(recipe(&data), &run), &Silent, &Collect::default()).unwrap();
    assert!(out.finished);
    let planted = planted_in_train(&run);
    assert!(!planted.is_empty(), "the split put no planted row in train");
    let entries = QuarantineLog::read(&RunDir::new(&run)).unwrap();
    let kinds = kinds(&run);
    assert!(kinds.contains(&"rollback_spike".to_string()), "{kinds:?}");
    // Each planted row's first spike quarantines its batch, named by sample id.
    let first: Vec<&QuarantineEntry> = entries
        .iter()
        .filter(|e| e.cause == SpikeCause::Undetermined)
        .collect();
    assert!(!first.is_empty(), "{entries:?}");
    for e in &entries {
        assert_eq!((e.rows.len(), e.ids.len()), (8, 8), "{e:?}");
        assert!(
            e.ids.iter().any(|id| planted.contains(id)),
            "a spike without a planted row: {e:?}"
        );
        assert!(e.loss > e.threshold, "{e:?}");
    }
    // The replay passed over each quarantined batch: its step trained on another one, normally.
    let train_loss: BTreeMap<u64, f64> = rows(&run.join("metrics.jsonl"))
        .into_iter()
        .filter(|r| r.get("train_loss").is_some())
        .map(|r| (r["step"].as_u64().unwrap(), r["train_loss"].as_f64().unwrap()))
        .collect();
    for e in &first {
        assert!(
            train_loss[&e.step] < f64::from(e.threshold),
            "step {} replayed its batch",
            e.step
        );
    }
    let again = entries
        .iter()
        .filter(|e| first.iter().any(|f| f.step == e.step && f.rows == e.rows))
        .count();
    assert_eq!(again, first.len(), "no batch spiked twice at its step");
    // A planted row that spiked again left, as a data cause, and only planted rows left.
    let left: BTreeSet<String> = entries
        .iter()
        .filter(|e| e.cause == SpikeCause::Data)
        .flat_map(left_ids)
        .collect();
    assert!(
        !left.is_empty() && left.is_subset(&planted),
        "left {left:?}, planted {planted:?}"
    );
    assert!(kinds.contains(&"drop_spiking".to_string()), "{kinds:?}");
    assert!(!kinds.contains(&"abort_spike".to_string()), "{kinds:?}");
}
