//! The models: a pre-LayerNorm transformer encoder for text, and an MLP for numeric features.
//!
//! Parameter paths read `embed.weight`, `pos.weight`, `blocks.0.attn.query.weight`,
//! `blocks.0.ffn.up.weight`, `norm.gamma`, `head.weight`: the recipe's prune globs
//! (`blocks.*.attn.*`, `blocks.*.ffn.*`) select them. Initialisation is drawn from the run's seed
//! on the host (ChaCha8), so it does not depend on the backend's global RNG or on other work in
//! the process.

use burn::module::{Module, Param};
use burn::nn::{Embedding, LayerNorm, LayerNormConfig, Linear};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use contrai_kernels::{
    attention, feed_forward, gelu, layer_norm, linear, normed_linears, residual_feed_forward,
};
use contrai_recipe::ModelKind;
use contrai_recipe::recipe::Model as ModelSpec;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::dropout::Dropout;
use crate::error::{Result, TrainError};

/// Seeded host-side initialisation.
pub struct Init {
    rng: ChaCha8Rng,
}

impl Init {
    /// An initialiser for `seed`.
    pub fn new(seed: u64) -> Self {
        Init {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x1417),
        }
    }

    /// `n` values uniform in ±`bound`.
    pub(crate) fn uniform(&mut self, n: usize, bound: f64) -> Vec<f32> {
        (0..n)
            .map(|_| ((self.rng.random::<f64>() * 2.0 - 1.0) * bound) as f32)
            .collect()
    }

    fn normal(&mut self, n: usize, std: f64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let u1: f64 = self.rng.random::<f64>().max(f64::MIN_POSITIVE);
                let u2: f64 = self.rng.random();
                ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * std) as f32
            })
            .collect()
    }

    /// A `[d_in, d_out]` linear layer: weights uniform in ±1/√d_in, zero bias.
    pub fn linear(&mut self, d_in: usize, d_out: usize, device: &Device) -> Linear {
        let w = self.uniform(d_in * d_out, 1.0 / (d_in as f64).sqrt());
        Linear {
            weight: Param::from_data(TensorData::new(w, [d_in, d_out]), device),
            bias: Some(Param::from_data(
                TensorData::new(vec![0f32; d_out], [d_out]),
                device,
            )),
        }
    }

    /// An `[n, d]` embedding drawn from N(0, 0.02²).
    pub fn embedding(&mut self, n: usize, d: usize, device: &Device) -> Embedding {
        Embedding {
            weight: Param::from_data(TensorData::new(self.normal(n * d, 0.02), [n, d]), device),
        }
    }
}

/// One tokenised batch on a device.
#[derive(Debug, Clone)]
pub struct TextBatch {
    /// Token ids, `[batch, seq]`.
    pub tokens: Tensor<2, Int>,
    /// 1 for real tokens, 0 for padding, `[batch, seq, 1]`.
    pub keep: Tensor<3>,
    /// 0 for real keys, -1e4 for padding, `[batch, 1, 1, seq]` (added to attention scores).
    pub key_bias: Tensor<4>,
    /// Real tokens a sample (at least 1), `[batch, 1]`.
    pub count: Tensor<2>,
    /// Class indices, `[batch]`.
    pub labels: Tensor<1, Int>,
}

impl TextBatch {
    /// Builds a batch from padded ids (`PAD` = 0) and class indices.
    pub fn new(ids: &[i32], labels: &[i32], seq: usize, device: &Device) -> TextBatch {
        let b = labels.len();
        let keep: Vec<f32> = ids.iter().map(|&t| if t == 0 { 0.0 } else { 1.0 }).collect();
        let bias: Vec<f32> = keep.iter().map(|k| (k - 1.0) * 1e4).collect();
        let count: Vec<f32> = keep.chunks(seq).map(|c| c.iter().sum::<f32>().max(1.0)).collect();
        TextBatch {
            tokens: Tensor::from_data(TensorData::new(ids.to_vec(), [b, seq]), device),
            keep: Tensor::from_data(TensorData::new(keep, [b, seq, 1]), device),
            key_bias: Tensor::from_data(TensorData::new(bias, [b, 1, 1, seq]), device),
            count: Tensor::from_data(TensorData::new(count, [b, 1]), device),
            labels: Tensor::from_data(TensorData::new(labels.to_vec(), [b]), device),
        }
    }

    /// Samples in the batch.
    pub fn len(&self) -> usize {
        self.labels.dims()[0]
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One batch of numeric features on a device.
#[derive(Debug, Clone)]
pub struct FeatureBatch {
    /// Standardised features, `[batch, features]`.
    pub x: Tensor<2>,
    /// Class indices, `[batch]`.
    pub labels: Tensor<1, Int>,
}

/// A batch for either model: tokens for the transformer, features for the MLP.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // a handful live at once; boxing buys nothing
pub enum Batch {
    /// Token ids and their masks.
    Text(TextBatch),
    /// Numeric features.
    Features(FeatureBatch),
}

impl Batch {
    /// Numeric features `[batch, dim]` with their class indices.
    pub fn features(x: &[f32], labels: &[i32], dim: usize, device: &Device) -> Batch {
        let b = labels.len();
        Batch::Features(FeatureBatch {
            x: Tensor::from_data(TensorData::new(x.to_vec(), [b, dim]), device),
            labels: Tensor::from_data(TensorData::new(labels.to_vec(), [b]), device),
        })
    }

    /// Class indices, `[batch]`.
    pub fn labels(&self) -> Tensor<1, Int> {
        match self {
            Batch::Text(b) => b.labels.clone(),
            Batch::Features(b) => b.labels.clone(),
        }
    }

    /// Samples in the batch.
    pub fn len(&self) -> usize {
        match self {
            Batch::Text(b) => b.len(),
            Batch::Features(b) => b.labels.dims()[0],
        }
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The model a recipe's `model.kind` names: one type for the loop, the guards and the exports.
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)] // one model a run; Burn's derive needs the variant inline
pub enum Classifier {
    /// The text transformer.
    Transformer(TextClassifier),
    /// The MLP for numeric features.
    Mlp(Mlp),
    /// A pretrained BERT-family encoder with a classification head.
    Bert(contrai_bert::BertClassifier),
}

impl Classifier {
    /// The recipe's model for `classes` classes; `inputs` is the MLP's input width (features a
    /// sample; the transformer's comes from the recipe).
    pub fn new(spec: &ModelSpec, classes: usize, inputs: usize, seed: u64, device: &Device) -> Result<Self> {
        match spec.kind {
            ModelKind::Mlp => Mlp::new(spec, inputs, classes, seed, device).map(Classifier::Mlp),
            ModelKind::Transformer => {
                TextClassifier::new(spec, classes, seed, device).map(Classifier::Transformer)
            }
            ModelKind::Bert => {
                crate::pretrained::classifier(spec, classes, seed, device).map(Classifier::Bert)
            }
        }
    }

    /// Class logits `[batch, classes]`; `drop` is `None` in evaluation.
    ///
    /// # Panics
    /// When the batch is of the other model's kind (the run encodes its data for its model).
    pub fn forward(&self, batch: &Batch, drop: Option<&Dropout>) -> Tensor<2> {
        match (self, batch) {
            (Classifier::Transformer(m), Batch::Text(b)) => m.forward(b, drop),
            (Classifier::Mlp(m), Batch::Features(b)) => m.forward(b.x.clone(), drop),
            (Classifier::Bert(m), Batch::Text(b)) => {
                let d = drop.map(crate::pretrained::Drop);
                m.forward(&crate::pretrained::inputs(b), d.as_ref())
            }
            _ => panic!("a batch of the other model's kind: the data was encoded for another model"),
        }
    }

    /// Output classes.
    pub fn classes(&self) -> usize {
        match self {
            Classifier::Transformer(m) => m.head.weight.dims()[1],
            Classifier::Mlp(m) => m.head.weight.dims()[1],
            Classifier::Bert(m) => m.classifier.weight.dims()[1],
        }
    }

    /// The transformer, when this is one (head pruning needs its blocks).
    pub fn transformer(&self) -> Option<&TextClassifier> {
        match self {
            Classifier::Transformer(m) => Some(m),
            Classifier::Mlp(_) | Classifier::Bert(_) => None,
        }
    }
}

/// The LayerNorms' epsilon (Burn's default), given to the fused kernel.
const LN_EPS: f64 = 1e-5;

/// Multi-head self-attention.
#[derive(Module, Debug)]
pub struct Attention {
    /// Query projection.
    pub query: Linear,
    /// Key projection.
    pub key: Linear,
    /// Value projection.
    pub value: Linear,
    /// Output projection.
    pub output: Linear,
    /// Heads.
    pub heads: usize,
}

impl Attention {
    /// Attention over `norm(x)` (the block's pre-norm): `x` is `[batch, seq, d]`, `key_bias`
    /// `[batch, 1, 1, seq]`.
    ///
    /// The heads' width is the query's output width over `heads`: a model whose pruned heads were
    /// removed (`compact`) has fewer heads of the same width.
    pub fn forward(&self, norm: &LayerNorm, x: Tensor<3>, key_bias: Tensor<4>) -> Tensor<3> {
        let [q, k, v] = normed_linears(norm, LN_EPS, [&self.query, &self.key, &self.value], x);
        linear(&self.output, attention(q, k, v, key_bias, self.heads, None))
    }
}

/// The position-wise feed-forward layer with GELU.
#[derive(Module, Debug)]
pub struct FeedForward {
    /// `d → ffn`.
    pub up: Linear,
    /// `ffn → d`.
    pub down: Linear,
}

/// A pre-LayerNorm transformer block.
#[derive(Module, Debug)]
pub struct Block {
    /// Norm before attention.
    pub ln1: LayerNorm,
    /// Self-attention.
    pub attn: Attention,
    /// Norm before the feed-forward layer.
    pub ln2: LayerNorm,
    /// Feed-forward layer.
    pub ffn: FeedForward,
}

/// The transformer encoder text classifier: token + position embeddings, pre-LN blocks, final
/// LayerNorm, mean pooling over real tokens, linear head.
#[derive(Module, Debug)]
pub struct TextClassifier {
    /// Token embeddings.
    pub embed: Embedding,
    /// Learned position embeddings.
    pub pos: Embedding,
    /// The blocks.
    pub blocks: Vec<Block>,
    /// Final norm.
    pub norm: LayerNorm,
    /// Classification head.
    pub head: Linear,
    /// Dropout probability.
    pub dropout: f64,
}

impl TextClassifier {
    /// Builds the model the recipe describes for `classes` classes.
    pub fn new(spec: &ModelSpec, classes: usize, seed: u64, device: &Device) -> Result<Self> {
        check_spec(spec, classes)?;
        let mut init = Init::new(seed);
        let d = spec.d_model;
        let ln = || LayerNormConfig::new(d).with_epsilon(LN_EPS).init(device);
        let embed = init.embedding(spec.vocab, d, device);
        let pos = init.embedding(spec.seq_len, d, device);
        let blocks = (0..spec.layers)
            .map(|_| Block {
                ln1: ln(),
                attn: Attention {
                    query: init.linear(d, d, device),
                    key: init.linear(d, d, device),
                    value: init.linear(d, d, device),
                    output: init.linear(d, d, device),
                    heads: spec.heads,
                },
                ln2: ln(),
                ffn: FeedForward {
                    up: init.linear(d, spec.ffn, device),
                    down: init.linear(spec.ffn, d, device),
                },
            })
            .collect();
        Ok(TextClassifier {
            embed,
            pos,
            blocks,
            norm: ln(),
            head: init.linear(d, classes, device),
            dropout: spec.dropout,
        })
    }

    /// Class logits `[batch, classes]`; `drop` is `None` in evaluation.
    pub fn forward(&self, batch: &TextBatch, drop: Option<&Dropout>) -> Tensor<2> {
        let x = (0..self.blocks.len()).fold(self.embed(batch, drop), |x, i| self.block(i, x, batch, drop));
        self.head(x, batch)
    }

    /// Token and position embeddings `[batch, seq, d]`: the first block's input.
    pub fn embed(&self, batch: &TextBatch, drop: Option<&Dropout>) -> Tensor<3> {
        let [_, s] = batch.tokens.dims();
        let d = self.pos.weight.dims()[1];
        let pos = self.pos.weight.val().narrow(0, 0, s).reshape([1, s, d]);
        dropped(self.embed.forward(batch.tokens.clone()) + pos, batch, drop, 0)
    }

    /// Block `i` on the residual stream `x` (`[batch, seq, d]`).
    pub fn block(&self, i: usize, x: Tensor<3>, batch: &TextBatch, drop: Option<&Dropout>) -> Tensor<3> {
        let block = &self.blocks[i];
        let site = 1 + 2 * i as u64;
        let a = block.attn.forward(&block.ln1, x.clone(), batch.key_bias.clone());
        let x = x + dropped(a, batch, drop, site);
        let (ffn, norm) = (&block.ffn, &block.ln2);
        if drop.is_none() {
            // One operation (in int8, one pass over blocks of rows).
            residual_feed_forward(norm, LN_EPS, &ffn.up, &ffn.down, x)
        } else {
            let f = feed_forward(&ffn.up, &ffn.down, layer_norm(norm, x.clone(), LN_EPS));
            x + dropped(f, batch, drop, site + 1)
        }
    }

    /// Class logits from the last block's output: final norm, mean over real tokens, the head.
    pub fn head(&self, x: Tensor<3>, batch: &TextBatch) -> Tensor<2> {
        let [b, _, d] = x.dims();
        let x = layer_norm(&self.norm, x, LN_EPS);
        let pooled = (x * batch.keep.clone()).sum_dim(1).reshape([b, d]) / batch.count.clone();
        linear(&self.head, pooled)
    }
}

/// `x` with `drop`'s mask of `site`, unchanged in evaluation.
fn dropped(x: Tensor<3>, batch: &TextBatch, drop: Option<&Dropout>, site: u64) -> Tensor<3> {
    match drop {
        Some(d) => d.apply(x, site, &batch.keep.device()),
        None => x,
    }
}

fn check_spec(spec: &ModelSpec, classes: usize) -> Result<()> {
    let bad = |m: String| Err(TrainError::Unsupported(m));
    if classes < 2 {
        return bad(format!(
            "a classifier needs at least 2 classes, the train partition has {classes}"
        ));
    }
    if spec.d_model == 0 || spec.heads == 0 || !spec.d_model.is_multiple_of(spec.heads) {
        return bad(format!(
            "model.d_model = {} must be a positive multiple of model.heads = {}",
            spec.d_model, spec.heads
        ));
    }
    if spec.seq_len == 0 || spec.vocab < 2 || spec.ffn == 0 {
        return bad("model.seq_len, model.ffn must be positive and model.vocab at least 2".into());
    }
    if !(0.0..1.0).contains(&spec.dropout) {
        return bad(format!("model.dropout = {} must lie in [0, 1)", spec.dropout));
    }
    Ok(())
}

/// Mean cross-entropy of `logits` `[batch, classes]` against class indices `[batch]`.
pub fn cross_entropy(logits: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1> {
    per_sample_cross_entropy(logits, labels).mean()
}

/// Cross-entropy of each sample (`[batch]`): what "the noisiest samples" are ranked by.
pub fn per_sample_cross_entropy(logits: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1> {
    let [b, _] = logits.dims();
    let logp = log_softmax(logits, 1);
    logp.gather(1, labels.reshape([b, 1])).reshape([b]).neg()
}

/// A multi-layer perceptron for numeric features: `layers` hidden GELU layers of width `ffn`.
#[derive(Module, Debug)]
pub struct Mlp {
    /// Hidden layers.
    pub layers: Vec<Linear>,
    /// Classification head.
    pub head: Linear,
    /// Dropout probability.
    pub dropout: f64,
}

impl Mlp {
    /// An MLP over `features` inputs for `classes` classes, sized by the recipe.
    pub fn new(
        spec: &ModelSpec,
        features: usize,
        classes: usize,
        seed: u64,
        device: &Device,
    ) -> Result<Self> {
        if features == 0 || classes < 2 || spec.ffn == 0 {
            return Err(TrainError::Unsupported(format!(
                "an MLP needs features > 0, ffn > 0 and 2+ classes (got {features}, {}, {classes})",
                spec.ffn
            )));
        }
        let mut init = Init::new(seed);
        let mut width = features;
        let layers = (0..spec.layers)
            .map(|_| {
                let l = init.linear(width, spec.ffn, device);
                width = spec.ffn;
                l
            })
            .collect();
        Ok(Mlp {
            layers,
            head: init.linear(width, classes, device),
            dropout: spec.dropout,
        })
    }

    /// Class logits `[batch, classes]` of features `[batch, features]`.
    pub fn forward(&self, x: Tensor<2>, drop: Option<&Dropout>) -> Tensor<2> {
        let device = x.device();
        let mut x = x;
        for (i, layer) in self.layers.iter().enumerate() {
            x = gelu(layer.forward(x));
            if let Some(dr) = drop {
                x = dr.apply(x, i as u64, &device);
            }
        }
        self.head.forward(x)
    }
}
