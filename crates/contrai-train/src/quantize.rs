//! Int8 post-training quantization of a trained model's weight matrices (Burn's
//! `quantize_weights`, symmetric int8, min-max calibration, per tensor or per block).

use burn::module::{Module, ModuleVisitor, Param, ParamGroup, ParamId, Quantizer};
use burn::tensor::Tensor;
use burn::tensor::quantization::{Calibration, QuantScheme, QuantStore, QuantValue, ScaleDtype};

use crate::error::{Result, TrainError};
use crate::model::Classifier;

/// How [`quantize_int8`] quantizes, in words (model cards, decisions).
pub const INT8_SCHEME: &str = "symmetric int8 weights, per tensor, min-max";

/// Symmetric int8 weights; `block` = Some(n) gives every n consecutive weights their own scale.
pub fn scheme(block: Option<u8>) -> QuantScheme {
    let s = QuantScheme::default()
        .with_value(QuantValue::Q8S)
        .with_store(QuantStore::Native);
    match block {
        Some(n) => s.per_block([n], ScaleDtype::F32),
        None => s.per_tensor(ScaleDtype::F32),
    }
}

/// The model with every 2-D weight matrix (embeddings, attention, feed-forward, head) stored as
/// int8; biases and LayerNorm parameters stay f32. With `block`, a matrix whose rows do not split
/// into blocks of that size (the classification head's) keeps one scale for the whole tensor.
pub fn quantize_int8(model: Classifier, block: Option<u8>) -> Classifier {
    let Some(n) = block.filter(|n| *n > 0) else {
        let mut q = Quantizer::new(Calibration::MinMax, scheme(None));
        return model.quantize_weights_group(&mut q, ParamGroup::from_predicate("weight"));
    };
    let mut matrices = Matrices(Vec::new());
    model.visit(&mut matrices);
    let (fits, rest): (Vec<_>, Vec<_>) = matrices
        .0
        .into_iter()
        .partition(|(_, cols)| cols.is_multiple_of(usize::from(n)));
    let ids = |v: Vec<(ParamId, usize)>| ParamGroup::from_ids(v.into_iter().map(|(id, _)| id).collect());
    let mut per_block = Quantizer::new(Calibration::MinMax, scheme(Some(n)));
    let mut per_tensor = Quantizer::new(Calibration::MinMax, scheme(None));
    model
        .quantize_weights_group(&mut per_block, ids(fits))
        .quantize_weights_group(&mut per_tensor, ids(rest))
}

/// The weight matrices (every 2-D parameter: biases and norms are 1-D) with their column counts.
struct Matrices(Vec<(ParamId, usize)>);

impl ModuleVisitor for Matrices {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if D == 2 {
            self.0.push((param.id, param.val().dims()[1]));
        }
    }
}

/// How [`quantize_int8`] quantizes with `block`, in words (model cards, decisions).
pub fn scheme_text(block: Option<u8>) -> String {
    match block.filter(|n| *n > 0) {
        Some(n) => format!("symmetric int8 weights, a scale every {n} weights, min-max"),
        None => INT8_SCHEME.into(),
    }
}

/// Bytes of a model's burnpack record (what it takes on disk).
pub fn record_bytes(model: &Classifier) -> Result<Vec<u8>> {
    model
        .clone()
        .into_record()
        .into_bytes()
        .map(|b| b.to_vec())
        .map_err(|e| TrainError::Unsupported(format!("serialising the model: {e}")))
}

/// `model` with the weights of the burnpack record `bytes` (a checkpoint's, or the int8 model's:
/// the record's tensors replace the model's, quantized ones included); `path` names it in errors.
pub fn load_record(model: Classifier, bytes: Vec<u8>, path: &std::path::Path) -> Result<Classifier> {
    use burn::store::ModuleRecord;
    use burn::tensor::Bytes;
    let bad = |e: &dyn std::fmt::Display| crate::error::record_err(path, e);
    let rec = ModuleRecord::from_bytes(Bytes::from_bytes_vec(bytes)).map_err(|e| bad(&e))?;
    model.try_load_record(rec).map_err(|e| bad(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Batch, TextBatch};
    use burn::tensor::Device;

    /// The default model's logits on two fixed samples.
    fn logits(model: &Classifier, device: &Device) -> Vec<f32> {
        let seq = contrai_recipe::Recipe::default().model.seq_len;
        let ids: Vec<i32> = (0..2 * seq as i32).map(|i| i % 100 + 4).collect();
        let b = Batch::Text(TextBatch::new(&ids, &[0, 1], seq, device));
        model.forward(&b, None).into_data().try_to_vec().unwrap()
    }

    #[test]
    fn int8_weights_round_trip_within_tolerance_and_shrink_the_record() {
        let device = Device::flex();
        let spec = contrai_recipe::Recipe::default().model;
        let model = Classifier::new(&spec, 2, 0, 7, &device).unwrap();
        let q = quantize_int8(model.clone(), None);
        let w = model.transformer().unwrap().blocks[0].ffn.up.weight.val();
        let qw = q.transformer().unwrap().blocks[0].ffn.up.weight.val();
        assert!(
            matches!(qw.dtype(), burn::tensor::DType::QFloat(_)),
            "{:?}",
            qw.dtype()
        );
        assert!(!matches!(
            q.transformer().unwrap().blocks[0].ln1.gamma.val().dtype(),
            burn::tensor::DType::QFloat(_)
        ));
        let back = q.transformer().unwrap().blocks[0]
            .ffn
            .up
            .weight
            .val()
            .dequantize();
        let max = w.clone().abs().max().into_scalar::<f32>();
        let err = (w - back).abs().max().into_scalar::<f32>();
        assert!(err <= max / 127.0 * 0.51, "error {err} vs step {}", max / 127.0);
        let (a, c) = (logits(&model, &device), logits(&q, &device));
        for (x, y) in a.iter().zip(&c) {
            assert!((x - y).abs() < 0.05, "{a:?} vs {c:?}");
        }
        let (dense, small) = (
            record_bytes(&model).unwrap().len(),
            record_bytes(&q).unwrap().len(),
        );
        assert!(dense as f64 / small as f64 > 3.5, "{dense} vs {small} bytes");
    }

    /// Every int8 weight of `model` dequantized to f32: what a dequantize-then-multiply
    /// evaluation computes.
    fn dequantized(model: Classifier) -> Classifier {
        struct Deq;
        impl burn::module::ModuleMapper for Deq {
            fn map_float<const D: usize>(&mut self, p: Param<Tensor<D>>) -> Param<Tensor<D>> {
                p.map(|t| match t.dtype() {
                    burn::tensor::DType::QFloat(_) => t.dequantize(),
                    _ => t,
                })
            }
        }
        model.map(&mut Deq)
    }

    #[test]
    fn the_int8_model_multiplies_in_int8() {
        let device = Device::flex();
        let spec = contrai_recipe::Recipe::default().model;
        let int8 = |seed| quantize_int8(Classifier::new(&spec, 2, 0, seed, &device).unwrap(), None);
        let (a, b) = (int8(7), int8(8));
        let first = logits(&a, &device);
        // Two int8 models in one process (their packed weights kept side by side): each its own.
        for q in [b, a.clone()] {
            let (int8, deq) = (logits(&q, &device), logits(&dequantized(q), &device));
            // The inputs of each int8 product are rounded to 7 bits: close to, not equal to, the
            // dequantized weights' f32 products.
            let diff = int8
                .iter()
                .zip(&deq)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(diff > 1e-6 && diff < 0.05, "{int8:?} vs {deq:?}");
        }
        assert_eq!(logits(&a, &device), first, "the same model, the same bits");
    }

    #[test]
    fn per_block_scales_track_the_weights_more_closely() {
        let device = Device::flex();
        let spec = contrai_recipe::Recipe::default().model;
        let model = Classifier::new(&spec, 2, 0, 7, &device).unwrap();
        let err = |q: &Classifier| {
            let w = model.transformer().unwrap().blocks[0].ffn.up.weight.val();
            let back = q.transformer().unwrap().blocks[0]
                .ffn
                .up
                .weight
                .val()
                .dequantize();
            (w - back).abs().max().into_scalar::<f32>()
        };
        let tensor = quantize_int8(model.clone(), None);
        let block = quantize_int8(model.clone(), Some(32));
        assert!(err(&block) <= err(&tensor), "{} vs {}", err(&block), err(&tensor));
        let bytes = |m: &Classifier| record_bytes(m).unwrap().len() as f64;
        assert!(
            bytes(&model) / bytes(&block) > 3.0,
            "{} vs {}",
            bytes(&model),
            bytes(&block)
        );
        let (a, c) = (logits(&model, &device), logits(&block, &device));
        assert!(
            a.iter().zip(&c).all(|(x, y)| (x - y).abs() < 0.05),
            "{a:?} vs {c:?}"
        );
    }
}
