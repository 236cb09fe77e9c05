//! Activation checkpointing (`model.gradient_checkpointing`): a micro-batch's gradients with only
//! each block's input kept from the forward pass. The forward runs once without a graph up to the
//! last block; the last block and the head run with theirs and are differentiated; then each block
//! below has its graph rebuilt from its kept input, one at a time, top down, and carries the
//! gradient of that input to the block below. Peak memory holds one block's activations instead
//! of all of them, for one more forward pass of every block but the last. Dropout masks are pure
//! functions of their site ([`Dropout`]), so the recomputed blocks draw the masks the first pass
//! drew and the gradients are those of the plain backward.

use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::Tensor;

use contrai_bert::BertClassifier;

use crate::dropout::Dropout;
use crate::model::{Classifier, TextBatch, TextClassifier, cross_entropy};
use crate::pretrained::{Drop as BertDrop, inputs};

/// A model with blocks, seen as its embeddings, its blocks and its head.
#[derive(Clone, Copy)]
pub enum Blocks<'a> {
    /// The text transformer.
    Transformer(&'a TextClassifier),
    /// A pretrained encoder.
    Bert(&'a BertClassifier),
}

impl<'a> Blocks<'a> {
    /// `model`'s blocks; `None` for a model without (the MLP).
    pub fn of(model: &'a Classifier) -> Option<Self> {
        match model {
            Classifier::Transformer(m) => Some(Blocks::Transformer(m)),
            Classifier::Bert(m) => Some(Blocks::Bert(m)),
            Classifier::Mlp(_) => None,
        }
    }

    /// How many.
    fn len(self) -> usize {
        match self {
            Blocks::Transformer(m) => m.blocks.len(),
            Blocks::Bert(m) => m.bert.encoder.layer.len(),
        }
    }

    /// The forward pass without a graph, on the parameters' values (shared, not copied), up to
    /// the last block: the inputs of the blocks below it, and its own input (the embeddings'
    /// output when there are no blocks).
    fn graphless(self, batch: &TextBatch, drop: Option<&Dropout>) -> (Vec<Tensor<3>>, Tensor<3>) {
        let run = |plain: Blocks<'_>| {
            let below = plain.len().saturating_sub(1);
            let mut kept = Vec::with_capacity(below);
            let mut x = plain.embed(batch, drop).inner();
            for i in 0..below {
                kept.push(x.clone());
                x = plain.block(i, x, batch, drop).inner();
            }
            (kept, x)
        };
        match self {
            Blocks::Transformer(m) => run(Blocks::Transformer(&m.valid())),
            Blocks::Bert(m) => run(Blocks::Bert(&m.valid())),
        }
    }

    /// The first block's input.
    fn embed(self, batch: &TextBatch, drop: Option<&Dropout>) -> Tensor<3> {
        match self {
            Blocks::Transformer(m) => m.embed(batch, drop),
            Blocks::Bert(m) => m.bert.embed(&inputs(batch), drop.map(BertDrop).as_ref()),
        }
    }

    /// Block `i` on `x`.
    fn block(self, i: usize, x: Tensor<3>, batch: &TextBatch, drop: Option<&Dropout>) -> Tensor<3> {
        match self {
            Blocks::Transformer(m) => m.block(i, x, batch, drop),
            // The batch's key bias is the encoder's (0 for real keys, -10⁴ for padding).
            Blocks::Bert(m) => m.bert.layer(i, x, &batch.key_bias, drop.map(BertDrop).as_ref()),
        }
    }

    /// Class logits from the last block's output.
    fn head(self, x: Tensor<3>, batch: &TextBatch, drop: Option<&Dropout>) -> Tensor<2> {
        match self {
            Blocks::Transformer(m) => m.head(x, batch),
            Blocks::Bert(m) => m.head(x, &inputs(batch), drop.map(BertDrop).as_ref()),
        }
    }
}

/// Accumulates into `acc` the gradients of `weight` × the mean loss of `batch` (what
/// [`crate::step::step_grads`] does for one micro-batch) and returns that weighted loss.
pub fn accumulate(
    model: &Classifier,
    blocks: Blocks<'_>,
    batch: &TextBatch,
    drop: Option<&Dropout>,
    weight: f64,
    acc: &mut GradientsAccumulator<Classifier>,
) -> f32 {
    let (kept, top) = blocks.graphless(batch, drop);
    // The last block and the head from the last block's input, differentiated at once (their
    // activations are needed first: computing them in the graphless pass would only repeat
    // them), then each block below from the top with the gradient of its output.
    let leaf = Tensor::from_inner(top).require_grad();
    let x = match blocks.len() {
        0 => leaf.clone(),
        n => blocks.block(n - 1, leaf.clone(), batch, drop),
    };
    let loss = cross_entropy(blocks.head(x, batch, drop), batch.labels.clone()).mul_scalar(weight);
    let mut grads = loss.backward();
    let mut g = leaf.grad_remove(&mut grads);
    acc.accumulate(model, GradientsParams::from_grads(grads, model));
    for (i, input) in kept.into_iter().enumerate().rev() {
        let leaf = Tensor::from_inner(input).require_grad();
        let out = blocks.block(i, leaf.clone(), batch, drop);
        let mut grads = backward_from(out, g.take());
        g = leaf.grad_remove(&mut grads);
        acc.accumulate(model, GradientsParams::from_grads(grads, model));
    }
    // Frozen embeddings (LoRA) build no graph: nothing of theirs to differentiate.
    let out = blocks.embed(batch, drop);
    if out.is_tracked() {
        let grads = backward_from(out, g);
        acc.accumulate(model, GradientsParams::from_grads(grads, model));
    }
    loss.into_scalar::<f32>()
}

/// The backward pass of `out`'s graph given the gradient of `out` (`sum(out · g)`: the
/// gradient reaching `out` is `g` itself, exactly); a missing gradient is zero.
fn backward_from(out: Tensor<3>, g: Option<Tensor<3>>) -> burn::tensor::Gradients {
    let g = g.unwrap_or_else(|| out.zeros_like().inner());
    (out * Tensor::from_inner(g)).sum().backward()
}
