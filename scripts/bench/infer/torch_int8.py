"""PyTorch's side of the int8 inference comparison: the default transformer's architecture
(../shared/anchors/torch_transformer_bench.py, the "manual" blocks: every projection an nn.Linear)
in eval mode, f32 against `torch.ao.quantization.quantize_dynamic` (int8 weights, activations
quantized per batch on the fly: fbgemm), batch 32, seq 128, interleaved; medians in ms.

    python torch_int8.py [--runs 30 --threads 2]
"""

import argparse
import importlib.util
import statistics
import time
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
ANCHOR = Path(__file__).resolve().parents[3] / ".." / "shared" / "anchors" / "torch_transformer_bench.py"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--anchor", default=str(ANCHOR))
    a = p.parse_args()
    spec = importlib.util.spec_from_file_location("anchor", a.anchor)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = m.Classifier("manual", 0.1).eval()
    q = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    ids, _ = m.lcg_data(1)
    pos = torch.arange(m.SEQ).unsqueeze(0).expand(m.BATCH, m.SEQ)
    f, i = [], []
    with torch.inference_mode():
        for r in range(a.runs + 3):
            t0 = time.perf_counter()
            model(ids, pos).numpy()
            t1 = time.perf_counter()
            q(ids, pos).numpy()
            t2 = time.perf_counter()
            if r >= 3:
                f.append((t1 - t0) * 1e3)
                i.append((t2 - t1) * 1e3)
    mf, mi = statistics.median(f), statistics.median(i)
    print(f"RESULT torch f32 {mf:.2f} ms, int8 {mi:.2f} ms a batch of {m.BATCH}: int8 / f32 = {mi / mf:.2f} "
          f"(engine {torch.backends.quantized.engine})")


if __name__ == "__main__":
    main()
