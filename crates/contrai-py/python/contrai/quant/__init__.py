"""Quantized language models: weight-only int8/int4 codes (:mod:`contrai.quant.weights`, round to
nearest or GPTQ), the files servers load (:mod:`contrai.quant.serving`: compressed-tensors and
GGUF), and refine's quantized variants made, measured and written (:mod:`contrai.quant.variants`)."""
