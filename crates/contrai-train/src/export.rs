//! What `final/` and `contrai compress` report about each exported model: parameters, real zeros,
//! bytes on disk, holdout and validation accuracy, CPU latency — one row a variant.

use std::path::Path;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::Device;
use contrai_run::Variant;

use crate::batch::Encoded;
use crate::error::{Result, record_err};
use crate::evaluate::evaluate;
use crate::model::Classifier;
use crate::prune::weights;

/// Samples a batch the latency is measured on.
pub const LATENCY_BATCH: usize = 32;

/// Share of the weight-matrix entries of `model` that are exactly zero.
pub fn zero_share(model: &Classifier) -> f64 {
    let all = weights(model, &|_| true);
    let n: usize = all.iter().map(|(_, _, v)| v.len()).sum();
    let zeros: usize = all
        .iter()
        .map(|(_, _, v)| v.iter().filter(|w| **w == 0.0).count())
        .sum();
    if n == 0 { 0.0 } else { zeros as f64 / n as f64 }
}

/// Median milliseconds of a forward pass of each model over the first [`LATENCY_BATCH`] samples
/// of `data`: one warm-up pass each, then 7 rounds in which every model runs once, so that the
/// machine's noise and warm-up fall on all of them alike.
pub fn latencies(models: &[&Classifier], data: &Encoded, device: &Device) -> Vec<Option<f64>> {
    let n = data.len().min(LATENCY_BATCH);
    if n == 0 {
        return vec![None; models.len()];
    }
    let rows: Vec<usize> = (0..n).collect();
    let b = data.batch(&rows, device);
    let time = |m: &Classifier| {
        let t = Instant::now();
        let _ = m.forward(&b, None).into_data();
        t.elapsed().as_secs_f64() * 1000.0
    };
    models.iter().for_each(|m| {
        time(m);
    });
    let mut times = vec![Vec::new(); models.len()];
    for _ in 0..7 {
        for (m, t) in models.iter().zip(&mut times) {
            t.push(time(m));
        }
    }
    times
        .into_iter()
        .map(|t| contrai_stats::median(&t).map(|m| (m * 100.0).round() / 100.0))
        .collect()
}

/// Sets each variant's latency, measured side by side (`models[i]` is `variants[i]`'s model).
pub fn time_variants(variants: &mut [Variant], models: &[&Classifier], data: &Encoded) {
    for (v, l) in variants.iter_mut().zip(latencies(models, data, &Device::flex())) {
        v.latency_ms = l;
    }
}

/// A variant's row: what the model is, and what the caller measured.
pub struct Measured {
    /// Validation accuracy.
    pub val_accuracy: f32,
    /// Holdout (loss, accuracy).
    pub holdout: (f32, f32),
    /// Bytes on disk.
    pub bytes: u64,
}

impl Measured {
    /// `model` evaluated on validation and holdout (on the plain CPU device), `bytes` on disk.
    pub fn of(model: &Classifier, val: &Encoded, holdout: &Encoded, batch: usize, bytes: u64) -> Measured {
        let device = Device::flex();
        Measured {
            val_accuracy: evaluate(model, val, batch, &device).1,
            holdout: evaluate(model, holdout, batch, &device),
            bytes,
        }
    }
}

/// The row of `model` named `name` (its latency is set by [`time_variants`]).
pub fn variant(name: &str, file: Option<String>, model: &Classifier, m: Measured, note: String) -> Variant {
    Variant {
        name: name.into(),
        file,
        parameters: model.num_params(),
        zero_weights: zero_share(model),
        bytes: m.bytes,
        val_accuracy: m.val_accuracy,
        holdout_accuracy: m.holdout.1,
        holdout_loss: m.holdout.0,
        latency_ms: None,
        note,
    }
}

/// Writes the model's weights as safetensors, atomically.
pub fn save_safetensors(model: &Classifier, path: &Path) -> Result<()> {
    use burn::store::{ModuleSnapshot, SafetensorsStore};
    // Paths as the modules name them (`blocks.0.ffn.up.weight`), without the enum variant.
    let mut store = SafetensorsStore::from_bytes(None).skip_enum_variants(true);
    model.save_into(&mut store).map_err(|e| record_err(path, e))?;
    let bytes = store.get_bytes().map_err(|e| record_err(path, e))?;
    contrai_base::write_atomic(path, &bytes)?;
    Ok(())
}

/// `model` with the weights of the safetensors file `path` (as [`save_safetensors`] writes them):
/// every tensor of the model must be there with its shape.
pub fn load_safetensors(mut model: Classifier, path: &Path) -> Result<Classifier> {
    use burn::store::{ModuleSnapshot, SafetensorsStore};
    let mut store = SafetensorsStore::from_file(path).skip_enum_variants(true);
    let applied = model.load_from(&mut store).map_err(|e| record_err(path, e))?;
    if !applied.missing.is_empty() || !applied.errors.is_empty() {
        let missing = applied.missing.iter().map(|(p, _)| p.as_str());
        let wrong = applied.errors.iter().map(|e| e.to_string());
        let what: Vec<String> = missing.map(|p| format!("{p} missing")).chain(wrong).collect();
        return Err(record_err(path, what.join("; ")));
    }
    Ok(model)
}
