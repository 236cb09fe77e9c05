//! The forward pass against `transformers` on a tiny random BERT (made once by
//! `scripts/fixtures/tiny_bert.py`, committed with the outputs it gave): the tokenizer's ids and
//! mask exactly, the hidden states, both poolings and the logits within 1e-4. Then the errors a
//! broken model directory gives.

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Int, Tensor, TensorData};
use contrai_bert::{BertError, Inputs, ModelDir, NoDropout, Pooling};
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-bert")
}

fn flat(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(a) => a.iter().flat_map(flat).collect(),
        x => vec![x.as_f64().unwrap() as f32],
    }
}

fn close(what: &str, got: Tensor<2>, want: &Value) {
    close_vec(what, got.into_data().try_to_vec::<f32>().unwrap(), flat(want));
}

fn close_vec(what: &str, got: Vec<f32>, want: Vec<f32>) {
    assert_eq!(got.len(), want.len(), "{what}: sizes");
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "{what}: off by {worst}");
    eprintln!(
        "{what}: worst {worst:e} over {} values, max abs {}",
        got.len(),
        want.iter().fold(0f32, |m, x| m.max(x.abs()))
    );
}

#[test]
fn the_forward_pass_matches_transformers() {
    check(&fixture());
}

/// The same check on a real checkpoint, by hand: `python scripts/fixtures/tiny_bert.py --check
/// DIR` writes `DIR/with-head/` (the model with a seeded head, and what transformers computes);
/// then `CONTRAI_BERT_CHECK=DIR/with-head cargo test -p contrai-bert -- --ignored --nocapture`.
#[test]
#[ignore = "needs a checkpoint on disk: CONTRAI_BERT_CHECK=DIR"]
fn a_real_checkpoint_matches_transformers() {
    let dir = std::env::var("CONTRAI_BERT_CHECK").expect("CONTRAI_BERT_CHECK=DIR");
    check(Path::new(&dir));
}

/// Tokens exactly, then hidden states, both poolings and the logits within 1e-4 of
/// `dir/expected.json`.
fn check(path: &Path) {
    let e: Value = serde_json::from_slice(&std::fs::read(path.join("expected.json")).unwrap()).unwrap();
    let dir = ModelDir::open(path).unwrap();
    let len = e["max_length"].as_u64().unwrap() as usize;
    let texts: Vec<&str> = e["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let tok = dir.tokenizer(len).unwrap().encode(&texts).unwrap();
    let want_ids: Vec<i32> = flat(&e["input_ids"]).iter().map(|&x| x as i32).collect();
    assert_eq!(tok.ids, want_ids, "token ids");
    assert_eq!(tok.mask, flat(&e["attention_mask"]), "attention mask");
    let device = Device::flex();
    let b = texts.len();
    let x = Inputs {
        ids: Tensor::<2, Int>::from_data(TensorData::new(tok.ids.clone(), [b, len]), &device),
        type_ids: Tensor::<2, Int>::from_data(TensorData::new(tok.type_ids.clone(), [b, len]), &device),
        mask: Tensor::<2>::from_data(TensorData::new(tok.mask.clone(), [b, len]), &device),
    };
    for pooling in [Pooling::Cls, Pooling::Mean] {
        let model = dir.classifier(2, pooling, &device).unwrap();
        let hidden = model.bert.forward(&x, None::<&NoDropout>);
        let pooled = model.bert.pool(hidden.clone(), &x.mask, pooling);
        let key = if pooling == Pooling::Cls {
            "pooled_cls"
        } else {
            "pooled_mean"
        };
        close(key, pooled, &e[key]);
        close_vec(
            "last_hidden_state",
            hidden.into_data().try_to_vec::<f32>().unwrap(),
            flat(&e["last_hidden_state"]),
        );
        if pooling == Pooling::Cls {
            close("logits", model.forward(&x, None::<&NoDropout>), &e["logits"]);
        }
    }
}

/// A copy of the fixture in a temporary directory, changed by `edit`.
fn broken(edit: impl FnOnce(&Path)) -> (tempfile::TempDir, BertError) {
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture().join(f), tmp.path().join(f)).unwrap();
    }
    edit(tmp.path());
    let err = ModelDir::open(tmp.path())
        .and_then(|d| {
            d.tokenizer(16)?;
            d.classifier(2, Pooling::Cls, &Device::flex())
        })
        .expect_err("an error");
    (tmp, err)
}

fn set_config(dir: &Path, key: &str, value: Value) {
    let p = dir.join("config.json");
    let mut c: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    c[key] = value;
    std::fs::write(&p, c.to_string()).unwrap();
}

#[test]
fn a_broken_model_directory_names_the_file_and_what_was_expected() {
    let (_t, e) = broken(|d| std::fs::remove_file(d.join("tokenizer.json")).unwrap());
    assert!(
        matches!(
            e,
            BertError::Missing {
                file: "tokenizer.json",
                ..
            }
        ),
        "{e}"
    );
    let (_t, e) = broken(|d| set_config(d, "model_type", "gpt2".into()));
    let m = e.to_string();
    assert!(
        m.contains("config.json") && m.contains("gpt2") && m.contains("expected `bert`"),
        "{m}"
    );
    let (_t, e) = broken(|d| set_config(d, "hidden_act", "relu".into()));
    assert!(e.to_string().contains("hidden_act `relu`"), "{e}");
    let (_t, e) = broken(|d| set_config(d, "intermediate_size", 48.into()));
    let m = e.to_string();
    assert!(
        m.contains("model.safetensors") && m.contains("intermediate.dense"),
        "{m}"
    );
    let (_t, e) = broken(|d| set_config(d, "num_hidden_layers", 3.into()));
    let m = e.to_string();
    assert!(m.contains("not in the file") && m.contains("layer.2"), "{m}");
    let (_t, e) = broken(|d| std::fs::write(d.join("tokenizer.json"), "{\"model\": 3}").unwrap());
    let m = e.to_string();
    assert!(m.contains("tokenizer.json") && m.contains("tokenizers"), "{m}");
}

/// `model.safetensors` with each tensor name rewritten by `rename` (the data untouched).
fn rename_tensors(path: &Path, rename: impl Fn(&str) -> String) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let renamed: serde_json::Map<String, Value> = header.into_iter().map(|(k, v)| (rename(&k), v)).collect();
    let mut h = serde_json::to_vec(&renamed).unwrap();
    h.resize(h.len().div_ceil(8) * 8, b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(&bytes[8 + n..]);
    std::fs::write(path, out).unwrap();
}

#[test]
fn an_encoder_saved_as_bert_model_loads_under_its_own_names() {
    // BertModel.save_pretrained (all-MiniLM ships so) writes `embeddings.*`, not `bert.embeddings.*`.
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture().join(f), tmp.path().join(f)).unwrap();
    }
    rename_tensors(&tmp.path().join("model.safetensors"), |k| {
        k.trim_start_matches("bert.").to_string()
    });
    let device = Device::flex();
    let a = ModelDir::open(&fixture())
        .unwrap()
        .classifier(2, Pooling::Mean, &device)
        .unwrap();
    let b = ModelDir::open(tmp.path())
        .unwrap()
        .classifier(2, Pooling::Mean, &device)
        .unwrap();
    let w = |m: &contrai_bert::BertClassifier| {
        let l = &m.bert.encoder.layer[1];
        let mut v = l
            .attention
            .self_attn
            .query
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        v.extend(
            l.output
                .layer_norm
                .gamma
                .val()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap(),
        );
        v
    };
    assert_eq!(w(&a), w(&b));
}
