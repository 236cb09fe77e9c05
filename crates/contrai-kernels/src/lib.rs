//! Contrai's own CPU kernels for Burn's flex backend.
//!
//! A training step of a transformer spends much of its time outside the matrix products: in
//! softmax, LayerNorm and GELU, which Burn's autodiff decomposes into chains of small operations.
//! This crate gives each one forward kernel and one backward kernel ([`fused`]), with the
//! arithmetic in [`math`] compiled for AVX-512, AVX2 and plain x86-64 and chosen at run time.
//! The functions below are the tensor-level entry points the models call; on a device without
//! autodiff they run the forward kernel alone.

pub mod bf16;
pub mod denormals;
pub mod dropout;
pub mod fused;
pub mod int8;
pub mod math;
pub mod matmul;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use burn::backend::Dispatch;
use burn::nn::{LayerNorm, Linear};
use burn::tensor::quantization::QuantizedBytes;
use burn::tensor::{DType, Tensor};

use dropout::Mask;
use fused::{Fused, Int8Layer, NormValues};
use int8::Int8Weights;
use xxhash_rust::xxh3::Xxh3;

/// GELU (exact erf form) of every element, with a fused backward pass.
pub fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as Fused>::fused_gelu(x.into_dispatch()))
}

/// Softmax over the last dimension, with a fused backward pass.
pub fn softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let row = x.dims()[D - 1];
    let zeros = Tensor::<1>::zeros([row], &x.device());
    Tensor::from_dispatch(<Dispatch as Fused>::fused_softmax(
        x.into_dispatch(),
        zeros.into_dispatch(),
        1.0,
    ))
}

/// Attention's probabilities `softmax(scores · scale + key_bias)` over the keys, in one
/// operation with a fused backward pass. `scores` is `[batch, heads, queries, keys]`; `key_bias`
/// `[batch, 1, 1, keys]` (0 for real keys, −1e4 for padding) is data and gets no gradient.
///
/// # Panics
/// When `key_bias` is not `[batch, 1, 1, keys]` for the scores' batch and keys.
pub fn attention_softmax(scores: Tensor<4>, scale: f32, key_bias: Tensor<4>) -> Tensor<4> {
    let [b, _, _, k] = scores.dims();
    assert_eq!(
        key_bias.dims(),
        [b, 1, 1, k],
        "attention_softmax: the key bias is [batch, 1, 1, keys]"
    );
    Tensor::from_dispatch(<Dispatch as Fused>::fused_softmax(
        scores.into_dispatch(),
        key_bias.into_dispatch(),
        scale,
    ))
}

/// A LayerNorm module applied over the last dimension with `eps` (Burn keeps a module's epsilon
/// private, so the caller, which built the module, says it), with a fused backward pass.
pub fn layer_norm<const D: usize>(norm: &LayerNorm, x: Tensor<D>, eps: f64) -> Tensor<D> {
    let (gamma, beta) = norm_params(norm);
    Tensor::from_dispatch(<Dispatch as Fused>::fused_layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        eps,
    ))
}

/// A linear layer applied to `x` (`[…, d_in]`), as one operation with its own backward pass
/// ([`matmul::linear`]: the bias added in the product's output, no broadcast batched matmul). A
/// weight stored as int8 with one scale runs in int8 arithmetic ([`int8::linear`]) when
/// evaluating; other quantized weights, and inputs other than f32, go through Burn's
/// `Linear::forward`.
pub fn linear<const D: usize>(layer: &Linear, x: Tensor<D>) -> Tensor<D> {
    let [y] = linears([layer], x);
    y
}

/// Linear layers applied to the same `x` (attention's query, key and value), each as
/// [`linear`]; when all of them run in int8, `x` is quantized once for all.
pub fn linears<const D: usize, const N: usize>(layers: [&Linear; N], x: Tensor<D>) -> [Tensor<D>; N] {
    linears_after(None, layers, x)
}

/// [`linears`] of `layer_norm(norm, x, eps)` (a pre-norm block's attention input); in int8, each
/// row is normalised just before it is quantized, never written out (the same bits).
pub fn normed_linears<const D: usize, const N: usize>(
    norm: &LayerNorm,
    eps: f64,
    layers: [&Linear; N],
    x: Tensor<D>,
) -> [Tensor<D>; N] {
    linears_after(Some((norm, eps)), layers, x)
}

/// A LayerNorm module and its epsilon, applied to the input of the layers that follow.
type PreNorm<'a> = Option<(&'a LayerNorm, f64)>;

fn linears_after<const D: usize, const N: usize>(
    norm: PreNorm,
    layers: [&Linear; N],
    x: Tensor<D>,
) -> [Tensor<D>; N] {
    if evaluates_f32(&x) {
        let int8: Option<Vec<_>> = layers.iter().map(|l| int8_layer(l)).collect();
        let int8 = int8.filter(|l| l.windows(2).all(|p| p[0].0.inputs() == p[1].0.inputs()));
        if let (Some(int8), Some(norm)) = (int8, norm_values(norm)) {
            let ys = <Dispatch as Fused>::fused_int8_linears(x.into_dispatch(), norm, int8.into());
            let mut ys = ys.into_iter().map(Tensor::from_dispatch);
            return std::array::from_fn(|_| ys.next().expect("one output a layer"));
        }
    }
    let x = match norm {
        Some((n, eps)) => layer_norm(n, x, eps),
        None => x,
    };
    layers.map(|layer| one_linear(layer, x.clone()))
}

/// A feed-forward block, `down(gelu(up(x)))` with [`linear`] and [`gelu`]; when both layers run
/// in int8, in one pass over blocks of rows ([`int8::feed_forward`]: the same bits, the hidden
/// activations never leave the cache).
pub fn feed_forward<const D: usize>(up: &Linear, down: &Linear, x: Tensor<D>) -> Tensor<D> {
    feed_forward_after(None, up, down, x)
}

/// A pre-norm block's feed-forward with its residual, `x + feed_forward(up, down,
/// layer_norm(norm, x, eps))`, for evaluation (no dropout between); in int8, one pass over blocks
/// of rows, normalisation and residual included (the same bits).
pub fn residual_feed_forward<const D: usize>(
    norm: &LayerNorm,
    eps: f64,
    up: &Linear,
    down: &Linear,
    x: Tensor<D>,
) -> Tensor<D> {
    feed_forward_after(Some((norm, eps)), up, down, x)
}

fn feed_forward_after<const D: usize>(norm: PreNorm, up: &Linear, down: &Linear, x: Tensor<D>) -> Tensor<D> {
    let int8 = || Some((int8_layer(up)?, int8_layer(down)?));
    let chains = |(u, d): &(Int8Layer, Int8Layer)| {
        u.0.outputs() == d.0.inputs() && (norm.is_none() || d.0.outputs() == u.0.inputs())
    };
    if evaluates_f32(&x)
        && let Some((u, d)) = int8().filter(chains)
        && let Some(norm) = norm_values(norm)
    {
        return Tensor::from_dispatch(<Dispatch as Fused>::fused_int8_feed_forward(
            x.into_dispatch(),
            norm,
            u,
            d,
        ));
    }
    match norm {
        Some((n, eps)) => x.clone() + linear(down, gelu(linear(up, layer_norm(n, x, eps)))),
        None => linear(down, gelu(linear(up, x))),
    }
}

/// Whether `x` is an f32 input being evaluated (no autodiff): what the int8 kernels take.
fn evaluates_f32<const D: usize>(x: &Tensor<D>) -> bool {
    x.dtype() == DType::F32 && !x.device().is_autodiff()
}

/// The pre-norm as the int8 kernels take it: `Some(None)` without one, `Some(Some(γ, β, ε))`
/// (β zeros when the module has none), `None` when its parameters are not f32 (the caller then
/// takes Burn's path).
fn norm_values(norm: PreNorm) -> Option<Option<NormValues>> {
    let Some((norm, eps)) = norm else {
        return Some(None);
    };
    let (gamma, beta) = norm_params(norm);
    let host = |t: Tensor<1>| t.into_data().try_into_vec::<f32>().ok().map(Arc::<[f32]>::from);
    Some(Some((host(gamma)?, host(beta)?, eps as f32)))
}

/// A LayerNorm module's γ and β (zeros when it has none).
fn norm_params(norm: &LayerNorm) -> (Tensor<1>, Tensor<1>) {
    let gamma = norm.gamma.val();
    let beta = match &norm.beta {
        Some(b) => b.val(),
        None => gamma.zeros_like(),
    };
    (gamma, beta)
}

/// [`linear`] in f32 (with its backward pass), or through Burn for other types.
fn one_linear<const D: usize>(layer: &Linear, x: Tensor<D>) -> Tensor<D> {
    let w = layer.weight.val();
    if x.dtype() != DType::F32 || w.dtype() != DType::F32 {
        return layer.forward(x);
    }
    let bias = match &layer.bias {
        Some(b) => b.val(),
        None => Tensor::zeros([w.dims()[1]], &w.device()),
    };
    Tensor::from_dispatch(<Dispatch as Fused>::fused_linear(
        x.into_dispatch(),
        w.into_dispatch(),
        bias.into_dispatch(),
    ))
}

/// A layer's weight packed for the int8 kernel and its bias, when the weight is stored as int8
/// with one scale.
fn int8_layer(layer: &Linear) -> Option<Int8Layer> {
    let weights = int8_weights(layer.weight.val())?;
    let bias = layer
        .bias
        .as_ref()
        .and_then(|b| b.val().into_data().try_into_vec::<f32>().ok())
        .map(Into::into);
    Some((weights, bias))
}

/// Multi-head self-attention's context from the query, key and value projections
/// (`[batch, seq, heads · dim]` each, as the linear layers give them), in one operation with its
/// own backward pass ([`matmul::attention`]): `softmax(q kᵀ / √dim + key_bias) ⊙ drop · v` for
/// each head, the heads read from and written to the projections' layout in place. `key_bias` is
/// `[batch, 1, 1, seq]` (0 for real keys, −1e4 for padding), data; `drop`'s mask, when given,
/// multiplies the probabilities (`[batch, heads, seq, seq]`), drawn head by head inside the kernel.
///
/// # Panics
/// When the width is not a multiple of `heads`, the three projections differ in shape, or the
/// key bias does not fit.
pub fn attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    key_bias: Tensor<4>,
    heads: usize,
    drop: Option<Mask>,
) -> Tensor<3> {
    let [b, s, width] = q.dims();
    assert!(
        heads > 0 && width.is_multiple_of(heads),
        "attention: a width of {width} does not split into {heads} heads"
    );
    assert!(
        k.dims() == q.dims() && v.dims() == q.dims(),
        "attention: q, k and v differ in shape"
    );
    assert_eq!(
        key_bias.dims(),
        [b, 1, 1, s],
        "attention: the key bias is [batch, 1, 1, seq]"
    );
    let scale = 1.0 / ((width / heads) as f32).sqrt();
    if q.dtype() != DType::F32 {
        return unfused_attention(q, k, v, key_bias, heads, drop, scale);
    }
    Tensor::from_dispatch(<Dispatch as Fused>::fused_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        key_bias.into_dispatch(),
        drop,
        heads,
        scale,
    ))
}

/// [`attention`] from Burn's operations (inputs other than f32).
fn unfused_attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    key_bias: Tensor<4>,
    heads: usize,
    drop: Option<Mask>,
    scale: f32,
) -> Tensor<3> {
    let [b, s, width] = q.dims();
    let split = |t: Tensor<3>| t.reshape([b, s, heads, width / heads]).swap_dims(1, 2);
    let (q, k, v) = (split(q), split(k), split(v));
    let mut probs = attention_softmax(q.matmul(k.swap_dims(2, 3)), scale, key_bias);
    if let Some(d) = drop {
        let mask = burn::tensor::TensorData::new(d.values(probs.shape().num_elements()), probs.dims());
        probs = probs.clone() * Tensor::from_data(mask, &probs.device());
    }
    probs.matmul(v).swap_dims(1, 2).reshape([b, s, width])
}

/// A weight stored as symmetric int8 with one scale for the tensor, packed for the int8 kernel.
/// An int8 model multiplies by the same weights batch after batch: each distinct weight is
/// packed once and kept (keyed by a 128-bit hash of its values, scale and shape), since packing
/// costs about 5 % of a forward pass.
fn int8_weights(w: Tensor<2>) -> Option<Arc<Int8Weights>> {
    static PACKED: Mutex<BTreeMap<u128, Arc<Int8Weights>>> = Mutex::new(BTreeMap::new());
    /// Packed bytes kept at most (a MiniLM-sized int8 model packs to ~22 MB); beyond, the cache
    /// starts over rather than grow with every model a long process evaluates.
    const KEEP_BYTES: usize = 256 << 20;
    let DType::QFloat(scheme) = w.dtype() else {
        return None;
    };
    if scheme.block_size().is_some() {
        return None;
    }
    let [k, n] = w.dims();
    let (bytes, shape, _) = w.into_data().into_parts();
    let (values, scales) = QuantizedBytes { bytes, scheme, shape }.into_vec_i8();
    let ([scale], None) = (scales.block.as_slice(), scales.global) else {
        return None;
    };
    if values.len() != k * n {
        return None;
    }
    let mut hasher = Xxh3::new();
    hasher.update(bytemuck::cast_slice(&values));
    hasher.update(&scale.to_le_bytes());
    hasher.update(&(k as u64).to_le_bytes());
    let key = hasher.digest128();
    // A poisoned lock only means another thread panicked while packing: the map is still whole.
    let mut packed = PACKED.lock().unwrap_or_else(|e| e.into_inner());
    if packed.values().map(|w| w.bytes()).sum::<usize>() >= KEEP_BYTES {
        packed.clear();
    }
    let weights = packed
        .entry(key)
        .or_insert_with(|| Arc::new(Int8Weights::new(&values, k, n, *scale)));
    Some(Arc::clone(weights))
}
