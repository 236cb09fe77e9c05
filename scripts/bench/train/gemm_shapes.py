"""PyTorch's side of ``crates/contrai-kernels/examples/gemm_shapes.rs``: the same products (``x @ w
+ b``, ``g @ w.T``, ``x.T @ g``) on the same shapes, 2 threads, GFLOP/s (medians).

    python scripts/bench/train/gemm_shapes.py [reps]
"""

import sys
import time

import torch

torch.set_num_threads(2)
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 9
rows = 4096
print(f"torch {torch.__version__} | shape (rows x in -> out) | forward | backward x | backward w  (GFLOP/s, median of {reps})")
for d_in, d_out in [(384, 384), (384, 1536), (1536, 384), (128, 128), (128, 512), (512, 128)]:
    x, w, b, g = torch.randn(rows, d_in), torch.randn(d_in, d_out), torch.randn(d_out), torch.randn(rows, d_out)
    flops = 2.0 * rows * d_in * d_out
    times: list[list[float]] = [[], [], []]
    for _ in range(reps):
        for i, f in enumerate((lambda: torch.addmm(b, x, w), lambda: g @ w.T, lambda: x.T @ g)):
            s = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - s)
    med = [sorted(t)[len(t) // 2] for t in times]
    print(f"{rows} x {d_in} -> {d_out} | " + " | ".join(f"{flops / m / 1e9:.1f}" for m in med))
