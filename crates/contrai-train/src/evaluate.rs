//! Evaluation: a model's mean loss and accuracy on a partition, in batches.

use burn::tensor::Device;
use contrai_recipe::Recipe;

use crate::batch::Encoded;
use crate::model::{Batch, Classifier, cross_entropy};

/// `data` in order, as batches of `batch` samples (the last one shorter).
pub fn eval_batches<'a>(
    data: &'a Encoded,
    batch: usize,
    device: &'a Device,
) -> impl Iterator<Item = Batch> + 'a {
    let batch = batch.max(1);
    (0..data.len()).step_by(batch).map(move |start| {
        let rows: Vec<usize> = (start..(start + batch).min(data.len())).collect();
        data.batch(&rows, device)
    })
}

/// The batch evaluation runs in (no gradients: twice the training batch, at least 32).
pub fn eval_batch(recipe: &Recipe) -> usize {
    (recipe.main.batch * 2).max(32)
}

/// Mean loss and accuracy of `model` on `data`, in batches of `batch`.
pub fn evaluate(model: &Classifier, data: &Encoded, batch: usize, device: &Device) -> (f32, f32) {
    if data.is_empty() {
        return (f32::NAN, f32::NAN);
    }
    let mut loss = 0f64;
    let mut correct = 0i64;
    for b in eval_batches(data, batch, device) {
        let n = b.len();
        let logits = model.forward(&b, None);
        let pred = logits.clone().argmax(1).reshape([n]);
        correct += pred.equal(b.labels()).int().sum().into_scalar::<i64>();
        loss += f64::from(cross_entropy(logits, b.labels()).into_scalar::<f32>()) * n as f64;
    }
    (
        (loss / data.len() as f64) as f32,
        correct as f32 / data.len() as f32,
    )
}
