//! `contrai compress` on a finished run: pruning with masked fine-tuning, int8 and the student,
//! made from the run's best checkpoint and measured side by side.

use crate::common;

use common::{Collect, demo_file, tiny_recipe, zero_counts};
use contrai_data::Silent;
use contrai_recipe::PruneScope as Scope;
use contrai_train::compress::{CompressOptions, CompressReport, compress};
use contrai_train::{Options, train};

fn options() -> CompressOptions {
    CompressOptions {
        prune: Some(0.5),
        scope: Scope::Global,
        heads: false,
        units: false,
        steps: 10,
        lr: None,
        int8: true,
        int8_block: None,
        distill: true,
        step: None,
    }
}

#[test]
fn compress_makes_pruned_int8_and_student_variants_from_the_best_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut recipe = tiny_recipe(&data, 30);
    let d = &mut recipe.refine.distill;
    (d.steps, d.eval_every, d.d_model, d.ffn, d.batch) = (20, 10, 16, 32, 8);
    let out = train(&Options::new(recipe, &run), &Silent, &Collect::default()).unwrap();
    let best = out.eval.unwrap().best.unwrap().0;

    let r = compress(&run, &options(), &Collect::default()).unwrap();
    assert_eq!(r.source_step, best, "the run's best checkpoint");
    let names: Vec<&str> = r.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["dense", "pruned", "int8", "pruned+int8", "student"]);
    let v = |n: &str| r.variants.iter().find(|v| v.name == n).unwrap();
    // Half of the prunable weights (both blocks' attention and feed-forward matrices) are zero.
    let (zeros, n) = zero_counts(&run.join("compress/pruned.safetensors"))
        .values()
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(n, r.prunable_entries);
    assert!((zeros as f64 / n as f64 - 0.5).abs() < 0.01, "{zeros} of {n}");
    assert!(
        v("int8").bytes * 3 < v("dense").bytes,
        "{} vs {}",
        v("int8").bytes,
        v("dense").bytes
    );
    assert!(v("student").parameters < v("dense").parameters);
    for n in names {
        let f = v(n).file.clone().unwrap();
        assert!(run.join(&f).is_file(), "{f}");
        assert!(v(n).holdout_accuracy.is_finite() && v(n).latency_ms.is_some());
    }
    let back: CompressReport =
        serde_json::from_slice(&std::fs::read(run.join("compress/compress.json")).unwrap()).unwrap();
    let key = |r: &CompressReport| -> Vec<(String, u64, Option<String>)> {
        r.variants
            .iter()
            .map(|v| (v.name.clone(), v.bytes, v.file.clone()))
            .collect()
    };
    assert_eq!(key(&back), key(&r));
    // Per-block int8: a scale (f32) every 16 weights costs 25 % more bytes than one a matrix.
    let blocks = CompressOptions {
        prune: None,
        distill: false,
        int8_block: Some(16),
        ..options()
    };
    let b = compress(&run, &blocks, &Collect::default()).unwrap();
    assert!(
        b.variants[1].note.contains("a scale every 16"),
        "{:?}",
        b.variants[1]
    );
    assert!(
        b.variants[1].bytes > v("int8").bytes && b.variants[1].bytes * 2 < v("dense").bytes,
        "{} vs {} vs {}",
        b.variants[1].bytes,
        v("int8").bytes,
        v("dense").bytes
    );
}

#[test]
fn compress_names_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let err = compress(tmp.path(), &options(), &Collect::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("not a run directory") && err.contains(&tmp.path().display().to_string()),
        "{err}"
    );
    let mut o = options();
    o.step = Some(7);
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    train(
        &Options::new(tiny_recipe(&data, 10), &run),
        &Silent,
        &Collect::default(),
    )
    .unwrap();
    let err = compress(&run, &o, &Collect::default()).unwrap_err().to_string();
    assert!(
        err.contains("step-00000007") && err.contains("keeps steps"),
        "{err}"
    );
}
