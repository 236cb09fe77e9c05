//! The BERT encoder in Burn, its modules named as Hugging Face names them (`bert.encoder.layer.0
//! .attention.self.query`, read here as `self_attn`; `LayerNorm` as `layer_norm`), so that loading
//! and exporting a checkpoint is a rename, not a rewrite: post-LayerNorm blocks, exact GELU,
//! absolute positions, the [CLS] pooler.

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor};

use contrai_kernels::dropout::Mask;
use contrai_kernels::{attention, feed_forward, layer_norm, linear, linears};
use serde::{Deserialize, Serialize};

use crate::config::BertConfig;

/// How a sequence's hidden states become one vector for the classification head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The [CLS] token's state through the pretrained pooler (dense + tanh): what Hugging Face's
    /// `BertForSequenceClassification` does.
    #[default]
    Cls,
    /// The mean of the real tokens' states: what sentence encoders (all-MiniLM) were trained for.
    Mean,
}

/// Dropout as the caller draws it, one site number a place in the network; `None` evaluates.
pub trait Dropper {
    /// `x` with the mask of `site` applied.
    fn drop<const D: usize>(&self, x: Tensor<D>, site: u64) -> Tensor<D>;
    /// The mask of `site` over the attention probabilities, drawn inside the attention kernel;
    /// `None` keeps them all.
    fn mask(&self, site: u64) -> Option<Mask>;
}

/// No dropout: evaluation.
#[derive(Debug, Clone, Copy)]
pub struct NoDropout;

impl Dropper for NoDropout {
    fn drop<const D: usize>(&self, x: Tensor<D>, _site: u64) -> Tensor<D> {
        x
    }

    fn mask(&self, _site: u64) -> Option<Mask> {
        None
    }
}

/// Word, position and token-type embeddings, summed and normalised.
#[derive(Module, Debug)]
pub struct Embeddings {
    /// Token ids → vectors.
    pub word_embeddings: Embedding,
    /// Absolute positions → vectors.
    pub position_embeddings: Embedding,
    /// Segments → vectors.
    pub token_type_embeddings: Embedding,
    /// Hugging Face's `LayerNorm`.
    pub layer_norm: LayerNorm,
}

/// Query, key and value projections (Hugging Face's `attention.self`).
#[derive(Module, Debug)]
pub struct SelfAttention {
    /// Query projection.
    pub query: Linear,
    /// Key projection.
    pub key: Linear,
    /// Value projection.
    pub value: Linear,
    /// Heads.
    pub heads: usize,
}

/// A sublayer's projection back to the hidden size, added to its input and normalised.
#[derive(Module, Debug)]
pub struct Output {
    /// The projection.
    pub dense: Linear,
    /// Hugging Face's `LayerNorm`.
    pub layer_norm: LayerNorm,
}

/// Self-attention with its output sublayer.
#[derive(Module, Debug)]
pub struct Attention {
    /// Hugging Face's `self`.
    pub self_attn: SelfAttention,
    /// Projection, residual, norm.
    pub output: Output,
}

/// The feed-forward layer's expansion.
#[derive(Module, Debug)]
pub struct Intermediate {
    /// `hidden → intermediate`.
    pub dense: Linear,
}

/// One encoder layer.
#[derive(Module, Debug)]
pub struct Layer {
    /// Self-attention.
    pub attention: Attention,
    /// Feed-forward expansion (GELU).
    pub intermediate: Intermediate,
    /// Feed-forward projection, residual, norm.
    pub output: Output,
}

/// The layers.
#[derive(Module, Debug)]
pub struct Encoder {
    /// Hugging Face's `layer`.
    pub layer: Vec<Layer>,
}

/// The [CLS] pooler: dense + tanh.
#[derive(Module, Debug)]
pub struct Pooler {
    /// The projection.
    pub dense: Linear,
}

/// The encoder.
#[derive(Module, Debug)]
pub struct Bert {
    /// Embeddings.
    pub embeddings: Embeddings,
    /// Layers.
    pub encoder: Encoder,
    /// The pooler.
    pub pooler: Pooler,
    /// The LayerNorms' epsilon (`config.layer_norm_eps`), for the fused kernel.
    #[module(skip)]
    pub layer_norm_eps: f64,
}

/// A classifier on the encoder, laid out as `BertForSequenceClassification` (`bert.*`,
/// `classifier.*`).
#[derive(Module, Debug)]
pub struct BertClassifier {
    /// The encoder.
    pub bert: Bert,
    /// The head: pooled vector → class logits.
    pub classifier: Linear,
    /// How the head's input is pooled.
    #[module(skip)]
    pub pooling: Pooling,
}

/// Model inputs: token ids, segments and the attention mask, `[batch, seq]` each.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Token ids.
    pub ids: Tensor<2, Int>,
    /// Token types (0 for a single sequence).
    pub type_ids: Tensor<2, Int>,
    /// 1 for real tokens, 0 for padding.
    pub mask: Tensor<2>,
}

impl BertClassifier {
    /// A model of `config`'s shape for `classes` classes, with Burn's default initialisation
    /// (a checkpoint's weights are loaded over it).
    pub fn new(config: &BertConfig, classes: usize, pooling: Pooling, device: &Device) -> Self {
        let h = config.hidden_size;
        let ln = || {
            LayerNormConfig::new(h)
                .with_epsilon(config.layer_norm_eps)
                .init(device)
        };
        let lin = |i: usize, o: usize| LinearConfig::new(i, o).init(device);
        let output = |i: usize| Output {
            dense: lin(i, h),
            layer_norm: ln(),
        };
        let layer = (0..config.num_hidden_layers)
            .map(|_| Layer {
                attention: Attention {
                    self_attn: SelfAttention {
                        query: lin(h, h),
                        key: lin(h, h),
                        value: lin(h, h),
                        heads: config.num_attention_heads,
                    },
                    output: output(h),
                },
                intermediate: Intermediate {
                    dense: lin(h, config.intermediate_size),
                },
                output: output(config.intermediate_size),
            })
            .collect();
        let emb = |n: usize| EmbeddingConfig::new(n, h).init(device);
        BertClassifier {
            bert: Bert {
                embeddings: Embeddings {
                    word_embeddings: emb(config.vocab_size),
                    position_embeddings: emb(config.max_position_embeddings),
                    token_type_embeddings: emb(config.type_vocab_size),
                    layer_norm: ln(),
                },
                encoder: Encoder { layer },
                pooler: Pooler { dense: lin(h, h) },
                layer_norm_eps: config.layer_norm_eps,
            },
            classifier: lin(h, classes),
            pooling,
        }
    }

    /// Class logits `[batch, classes]`.
    pub fn forward<D: Dropper>(&self, x: &Inputs, drop: Option<&D>) -> Tensor<2> {
        self.head(self.bert.forward(x, drop), x, drop)
    }

    /// Class logits from the last layer's hidden states: pooling, dropout, the classifier.
    pub fn head<D: Dropper>(&self, hidden: Tensor<3>, x: &Inputs, drop: Option<&D>) -> Tensor<2> {
        let pooled = self.bert.pool(hidden, &x.mask, self.pooling);
        linear(&self.classifier, dropped(pooled, drop, SITE_HEAD))
    }
}

impl Bert {
    /// The last layer's hidden states `[batch, seq, hidden]`.
    pub fn forward<D: Dropper>(&self, x: &Inputs, drop: Option<&D>) -> Tensor<3> {
        let bias = key_bias(x);
        (0..self.encoder.layer.len()).fold(self.embed(x, drop), |hs, i| self.layer(i, hs, &bias, drop))
    }

    /// The embeddings' output `[batch, seq, hidden]`: the first layer's input.
    pub fn embed<D: Dropper>(&self, x: &Inputs, drop: Option<&D>) -> Tensor<3> {
        let [_, s] = x.ids.dims();
        let e = &self.embeddings;
        let h = e.word_embeddings.weight.dims()[1];
        let pos = e
            .position_embeddings
            .weight
            .val()
            .narrow(0, 0, s)
            .reshape([1, s, h]);
        let sum = e.word_embeddings.forward(x.ids.clone())
            + pos
            + e.token_type_embeddings.forward(x.type_ids.clone());
        dropped(
            layer_norm(&e.layer_norm, sum, self.layer_norm_eps),
            drop,
            SITE_EMBEDDINGS,
        )
    }

    /// Layer `i` on `hs` (`[batch, seq, hidden]`), `bias` the padding's [`key_bias`].
    pub fn layer<D: Dropper>(
        &self,
        i: usize,
        hs: Tensor<3>,
        bias: &Tensor<4>,
        drop: Option<&D>,
    ) -> Tensor<3> {
        let (l, eps) = (&self.encoder.layer[i], self.layer_norm_eps);
        // Three dropout sites a layer after the embeddings' one.
        let at = SITE_EMBEDDINGS + 1 + 3 * i as u64;
        let mask = drop.and_then(|d| d.mask(at));
        let ctx = l.attention.self_attn.forward(hs.clone(), bias.clone(), mask);
        let a = linear(&l.attention.output.dense, ctx);
        let hs = layer_norm(&l.attention.output.layer_norm, dropped(a, drop, at + 1) + hs, eps);
        let f = feed_forward(&l.intermediate.dense, &l.output.dense, hs.clone());
        layer_norm(&l.output.layer_norm, dropped(f, drop, at + 2) + hs, eps)
    }

    /// One vector a sequence `[batch, hidden]`: the pooled [CLS] state, or the real tokens' mean.
    pub fn pool(&self, hidden: Tensor<3>, mask: &Tensor<2>, pooling: Pooling) -> Tensor<2> {
        let [b, _, h] = hidden.dims();
        match pooling {
            Pooling::Cls => {
                let cls = hidden.narrow(1, 0, 1).reshape([b, h]);
                linear(&self.pooler.dense, cls).tanh()
            }
            Pooling::Mean => {
                let keep = mask.clone().unsqueeze_dim::<3>(2);
                let count = mask.clone().sum_dim(1).clamp_min(1.0);
                (hidden * keep).sum_dim(1).reshape([b, h]) / count
            }
        }
    }
}

/// The head's dropout site.
const SITE_HEAD: u64 = 0;
/// The embeddings' dropout site.
const SITE_EMBEDDINGS: u64 = 1;

/// `t` with `drop`'s mask of `site`, unchanged in evaluation.
fn dropped<Dr: Dropper, const R: usize>(t: Tensor<R>, drop: Option<&Dr>, site: u64) -> Tensor<R> {
    match drop {
        Some(d) => d.drop(t, site),
        None => t,
    }
}

/// What every head adds to its scores `[batch, 1, 1, seq]`: 0 for real keys, -10⁴ for padding.
fn key_bias(x: &Inputs) -> Tensor<4> {
    let [b, s] = x.ids.dims();
    x.mask
        .clone()
        .sub_scalar(1.0)
        .mul_scalar(1e4)
        .reshape([b, 1, 1, s])
}

impl SelfAttention {
    /// The heads' context vectors `[batch, seq, hidden]`; `drop`'s mask multiplies the attention
    /// probabilities (`[batch, heads, seq, seq]`).
    pub fn forward(&self, x: Tensor<3>, bias: Tensor<4>, drop: Option<Mask>) -> Tensor<3> {
        let [q, k, v] = linears([&self.query, &self.key, &self.value], x);
        attention(q, k, v, bias, self.heads, drop)
    }
}
