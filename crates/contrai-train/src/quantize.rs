//! Int8 post-training quantization of a trained model's weight matrices (Burn's
//! `quantize_weights`, symmetric int8, min-max calibration, per tensor or per block).

use burn::module::{Module, ParamGroup, Quantizer};
use burn::tensor::quantization::{Calibration, QuantScheme, QuantStore, QuantValue, ScaleDtype};

use crate::error::{Result, TrainError};
use crate::model::TextClassifier;

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
/// int8; biases and LayerNorm parameters stay f32.
pub fn quantize_int8(model: TextClassifier, block: Option<u8>) -> TextClassifier {
    let mut q = Quantizer::new(Calibration::MinMax, scheme(block));
    model.quantize_weights_group(&mut q, ParamGroup::from_predicate("weight"))
}

/// Bytes of a model's burnpack record (what it takes on disk).
pub fn record_bytes(model: &TextClassifier) -> Result<Vec<u8>> {
    model
        .clone()
        .into_record()
        .into_bytes()
        .map(|b| b.to_vec())
        .map_err(|e| TrainError::Unsupported(format!("serialising the model: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TextBatch;
    use burn::tensor::Device;

    #[test]
    fn int8_weights_round_trip_within_tolerance_and_shrink_the_record() {
        let device = Device::flex();
        let spec = contrai_recipe::Recipe::default().model;
        let model = TextClassifier::new(&spec, 2, 7, &device).unwrap();
        let q = quantize_int8(model.clone(), None);
        let w = model.blocks[0].ffn.up.weight.val();
        let qw = q.blocks[0].ffn.up.weight.val();
        assert!(
            matches!(qw.dtype(), burn::tensor::DType::QFloat(_)),
            "{:?}",
            qw.dtype()
        );
        assert!(!matches!(
            q.blocks[0].ln1.gamma.val().dtype(),
            burn::tensor::DType::QFloat(_)
        ));
        let back = q.blocks[0].ffn.up.weight.val().dequantize();
        let max = w.clone().abs().max().into_scalar::<f32>();
        let err = (w - back).abs().max().into_scalar::<f32>();
        assert!(err <= max / 127.0 * 0.51, "error {err} vs step {}", max / 127.0);
        let ids: Vec<i32> = (0..2 * spec.seq_len as i32).map(|i| i % 100 + 4).collect();
        let b = TextBatch::new(&ids, &[0, 1], spec.seq_len, &device);
        let a: Vec<f32> = model.forward(&b, None).into_data().try_to_vec().unwrap();
        let c: Vec<f32> = q.forward(&b, None).into_data().try_to_vec().unwrap();
        for (x, y) in a.iter().zip(&c) {
            assert!((x - y).abs() < 0.05, "{a:?} vs {c:?}");
        }
        let (dense, small) = (
            record_bytes(&model).unwrap().len(),
            record_bytes(&q).unwrap().len(),
        );
        assert!(dense as f64 / small as f64 > 3.5, "{dense} vs {small} bytes");
    }
}
