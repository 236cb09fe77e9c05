//! Contrai's own CPU kernels for Burn's flex backend.
//!
//! A training step of a transformer spends much of its time outside the matrix products: in
//! softmax, LayerNorm and GELU, which Burn's autodiff decomposes into chains of small operations.
//! This crate gives each one forward kernel and one backward kernel ([`fused`]), with the
//! arithmetic in [`math`] compiled for AVX-512, AVX2 and plain x86-64 and chosen at run time.
//! The functions below are the tensor-level entry points the models call; on a device without
//! autodiff they run the forward kernel alone.

pub mod fused;
pub mod int8;
pub mod math;
pub mod matmul;

use burn::backend::Dispatch;
use burn::nn::{LayerNorm, Linear};
use burn::tensor::quantization::QuantizedBytes;
use burn::tensor::{DType, Tensor};

use fused::Fused;
use int8::Int8Weights;

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
    let gamma = norm.gamma.val();
    let beta = match &norm.beta {
        Some(b) => b.val(),
        None => gamma.zeros_like(),
    };
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
    let w = layer.weight.val();
    if x.dtype() != DType::F32 {
        return layer.forward(x);
    }
    if w.dtype() == DType::F32 {
        let bias = match &layer.bias {
            Some(b) => b.val(),
            None => Tensor::zeros([w.dims()[1]], &w.device()),
        };
        return Tensor::from_dispatch(<Dispatch as Fused>::fused_linear(
            x.into_dispatch(),
            w.into_dispatch(),
            bias.into_dispatch(),
        ));
    }
    if x.device().is_autodiff() {
        return layer.forward(x);
    }
    let Some(weights) = int8_weights(w) else {
        return layer.forward(x);
    };
    let bias: Option<std::sync::Arc<[f32]>> = layer
        .bias
        .as_ref()
        .and_then(|b| b.val().into_data().try_into_vec::<f32>().ok())
        .map(Into::into);
    Tensor::from_dispatch(<Dispatch as Fused>::fused_int8_linear(
        x.into_dispatch(),
        std::sync::Arc::new(weights),
        bias,
    ))
}

/// Multi-head self-attention's context from the query, key and value projections
/// (`[batch, seq, heads · dim]` each, as the linear layers give them), in one operation with its
/// own backward pass ([`matmul::attention`]): `softmax(q kᵀ / √dim + key_bias) ⊙ drop · v` for
/// each head, the heads read from and written to the projections' layout in place. `key_bias` is
/// `[batch, 1, 1, seq]` (0 for real keys, −1e4 for padding); `drop`, when given, multiplies the
/// probabilities (`[batch, heads, seq, seq]` values: 0 or 1 / (1 − p)). Both are data.
///
/// # Panics
/// When the width is not a multiple of `heads`, the three projections differ in shape, or the
/// key bias or dropout mask does not fit.
pub fn attention(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    key_bias: Tensor<4>,
    heads: usize,
    drop: Option<std::sync::Arc<[f32]>>,
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
    drop: Option<std::sync::Arc<[f32]>>,
    scale: f32,
) -> Tensor<3> {
    let [b, s, width] = q.dims();
    let split = |t: Tensor<3>| t.reshape([b, s, heads, width / heads]).swap_dims(1, 2);
    let (q, k, v) = (split(q), split(k), split(v));
    let mut probs = attention_softmax(q.matmul(k.swap_dims(2, 3)), scale, key_bias);
    if let Some(d) = drop {
        let mask = burn::tensor::TensorData::new(d.to_vec(), probs.dims());
        probs = probs.clone() * Tensor::from_data(mask, &probs.device());
    }
    probs.matmul(v).swap_dims(1, 2).reshape([b, s, width])
}

/// The int8 values and scale of a weight stored as symmetric int8 with one scale for the tensor.
fn int8_weights(w: Tensor<2>) -> Option<Int8Weights> {
    let DType::QFloat(scheme) = w.dtype() else {
        return None;
    };
    if scheme.block_size().is_some() {
        return None;
    }
    let [k, n] = w.dims();
    let (bytes, shape, _) = w.into_data().into_parts();
    let (values, scales) = QuantizedBytes { bytes, scheme, shape }.into_vec_i8();
    match (scales.block.as_slice(), scales.global) {
        ([scale], None) if values.len() == k * n => Some(Int8Weights::new(&values, k, n, *scale)),
        _ => None,
    }
}
