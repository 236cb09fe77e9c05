//! `model.kind = "bert"`: the recipe's pretrained directory opened (config, tokenizer, weights
//! checked by `contrai-bert`), its sizes read into the model spec, and the engine's dropout and
//! batches adapted to the encoder.

use std::path::Path;

use burn::tensor::{Device, Int, Tensor};
use contrai_bert::{BertClassifier, Dropper, Inputs, ModelDir, Pooling};
use contrai_recipe::recipe::Model as ModelSpec;

use crate::dropout::{Dropout, Mask};
use crate::error::{Result, TrainError};
use crate::model::{Init, TextBatch};

/// The recipe's pretrained directory, opened and checked.
pub fn open(spec: &ModelSpec) -> Result<ModelDir> {
    let dir = spec.pretrained.as_deref().ok_or_else(|| {
        TrainError::Unsupported(
            "model.kind = \"bert\" needs model.pretrained (a Hugging Face model directory)".into(),
        )
    })?;
    Ok(ModelDir::open(Path::new(dir))?)
}

/// `spec` with the checkpoint's sizes (vocabulary, width, layers, heads, feed-forward width)
/// in place of the recipe's, which do not apply to a pretrained model.
pub fn sized(spec: &ModelSpec) -> Result<ModelSpec> {
    let c = open(spec)?.config;
    Ok(ModelSpec {
        vocab: c.vocab_size,
        d_model: c.hidden_size,
        layers: c.num_hidden_layers,
        heads: c.num_attention_heads,
        ffn: c.intermediate_size,
        ..spec.clone()
    })
}

/// The classifier: the checkpoint's encoder and a fresh head drawn from the run's seed.
pub fn classifier(spec: &ModelSpec, classes: usize, seed: u64, device: &Device) -> Result<BertClassifier> {
    if classes < 2 {
        return Err(TrainError::Unsupported(format!(
            "a classifier needs at least 2 classes, the train partition has {classes}"
        )));
    }
    let pooling = match spec.pooling.unwrap_or_default() {
        contrai_recipe::Pooling::Cls => Pooling::Cls,
        contrai_recipe::Pooling::Mean => Pooling::Mean,
    };
    let mut m = open(spec)?.classifier(classes, pooling, device)?;
    m.classifier = Init::new(seed).linear(m.classifier.weight.dims()[0], classes, device);
    Ok(m)
}

/// A text batch as the encoder reads it: one segment, the padding mask from the ids (pad = 0).
pub fn inputs(b: &TextBatch) -> Inputs {
    let [n, s] = b.tokens.dims();
    Inputs {
        ids: b.tokens.clone(),
        type_ids: Tensor::<2, Int>::zeros([n, s], &b.tokens.device()),
        mask: b.keep.clone().reshape([n, s]),
    }
}

/// The engine's seeded dropout at the encoder's sites.
pub struct Drop<'a>(pub &'a Dropout);

impl Dropper for Drop<'_> {
    fn drop<const D: usize>(&self, x: Tensor<D>, site: u64) -> Tensor<D> {
        let device = x.device();
        self.0.apply(x, site, &device)
    }

    fn mask(&self, site: u64) -> Option<Mask> {
        self.0.mask(site)
    }
}

/// Writes `model` as a Hugging Face model directory `out` (`transformers` loads it): the
/// weights under `BertForSequenceClassification`'s names, the config with `labels` and the run's
/// dropout, the checkpoint's tokenizer files.
pub fn export_hf(spec: &ModelSpec, model: &BertClassifier, labels: &[String], out: &Path) -> Result<()> {
    let dir = open(spec)?;
    let config = contrai_bert::BertConfig {
        hidden_dropout_prob: spec.dropout,
        attention_probs_dropout_prob: spec.dropout,
        ..dir.config.clone()
    };
    std::fs::create_dir_all(out).map_err(|e| TrainError::io(out, e))?;
    for (name, bytes) in contrai_bert::export::export(model, &config, labels, &dir.dir)? {
        contrai_base::write_atomic(out.join(name), &bytes)?;
    }
    Ok(())
}

/// The tiny random BERT test fixture (`contrai-bert/tests/fixtures/tiny-bert`) as a 2-class
/// classifier, 8 tokens, the [CLS] pooler.
#[cfg(test)]
pub(crate) fn fixture(device: &Device) -> crate::model::Classifier {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../contrai-bert/tests/fixtures/tiny-bert"
    );
    let spec = ModelSpec {
        kind: contrai_recipe::ModelKind::Bert,
        pretrained: Some(dir.into()),
        seq_len: 8,
        ..Default::default()
    };
    crate::model::Classifier::new(&sized(&spec).unwrap(), 2, 0, 3, device).unwrap()
}
