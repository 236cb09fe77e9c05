//! What `final/` and `contrai compress` report about each exported model: parameters, real zeros,
//! bytes on disk, holdout and validation accuracy, CPU latency — one row a variant.

use std::time::Instant;

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::batch::Encoded;
use crate::model::{TextBatch, TextClassifier};
use crate::prune::weights;

/// Samples a batch the latency is measured on.
pub const LATENCY_BATCH: usize = 32;

/// One exported model, as the model card and the compression table show it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Variant {
    /// `f32`, `int8`, `pruned`, `student` ...
    pub name: String,
    /// Its file, relative to the run directory (None when it was not kept).
    pub file: Option<String>,
    /// Parameters (zeros included).
    pub parameters: usize,
    /// Share of the weight-matrix entries that are exactly zero.
    pub zero_weights: f64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Validation accuracy.
    pub val_accuracy: f32,
    /// Holdout accuracy.
    pub holdout_accuracy: f32,
    /// Mean holdout loss.
    pub holdout_loss: f32,
    /// Median CPU milliseconds of a forward pass over [`LATENCY_BATCH`] validation samples.
    pub latency_ms: Option<f64>,
    /// Why it was refused, or how it was made.
    pub note: String,
}

/// Share of the weight-matrix entries of `model` that are exactly zero.
pub fn zero_share(model: &TextClassifier) -> f64 {
    let all = weights(model, &|_| true);
    let n: usize = all.iter().map(|(_, _, v)| v.len()).sum();
    let zeros: usize = all
        .iter()
        .map(|(_, _, v)| v.iter().filter(|w| **w == 0.0).count())
        .sum();
    if n == 0 { 0.0 } else { zeros as f64 / n as f64 }
}

/// Median milliseconds of a forward pass of `model` over the first [`LATENCY_BATCH`] samples of
/// `data` (one warm-up, then 5 timed runs).
pub fn latency_ms(model: &TextClassifier, data: &Encoded, device: &Device) -> Option<f64> {
    let n = data.len().min(LATENCY_BATCH);
    if n == 0 {
        return None;
    }
    let rows: Vec<usize> = (0..n).collect();
    let (ids, labels) = data.gather(&rows);
    let b = TextBatch::new(&ids, &labels, data.seq, device);
    let mut times: Vec<f64> = (0..6)
        .map(|_| {
            let t = Instant::now();
            let _ = model.forward(&b, None).into_data();
            t.elapsed().as_secs_f64() * 1000.0
        })
        .skip(1)
        .collect();
    times.sort_by(f64::total_cmp);
    Some((times[times.len() / 2] * 100.0).round() / 100.0)
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

impl Variant {
    /// The row of `model` named `name`, timed on `data`.
    pub fn new(
        name: &str,
        file: Option<String>,
        model: &TextClassifier,
        m: Measured,
        data: &Encoded,
        note: String,
    ) -> Variant {
        Variant {
            name: name.into(),
            file,
            parameters: model.num_params(),
            zero_weights: zero_share(model),
            bytes: m.bytes,
            val_accuracy: m.val_accuracy,
            holdout_accuracy: m.holdout.1,
            holdout_loss: m.holdout.0,
            latency_ms: latency_ms(model, data, &Device::flex()),
            note,
        }
    }
}
