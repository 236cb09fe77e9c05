"""Side-by-side timing: `contrai doctor --json` vs TensorBoard's EventAccumulator.

usage: bench.py CONTRAI_BIN REPLAY_BIN RUNS FILE...   (prints a markdown table)
REPLAY_BIN is contrai-doctor's `replay` example: it reports the library's own read + diagnose
time (in-process, like the EventAccumulator column).
Each repetition alternates the two readers on the same file; medians are reported.
"""
import os
import statistics
import subprocess
import sys
import time

from tensorboard.backend.event_processing import event_accumulator


def tb_read(path):
    ea = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    ea.Reload()
    n = 0
    for tag in ea.Tags()["scalars"]:
        n += len(ea.Scalars(tag))
    return n


def contrai_read(binary, path):
    r = subprocess.run([binary, "doctor", "--json", path], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    if r.returncode not in (0, 1):
        raise SystemExit(f"contrai failed on {path}: {r.stderr.decode()}")


def python_start_cost(runs):
    """Median wall time of a fresh interpreter importing event_accumulator (CLI-to-CLI view)."""
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c",
                        "from tensorboard.backend.event_processing import event_accumulator"],
                       check=True)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def replay_ms(replay, path):
    r = subprocess.run([replay, path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # "<n> points; read <a> ms, diagnose <b> ms"
    words = r.stderr.replace(",", " ").split()
    return (float(words[words.index("read") + 1]) + float(words[words.index("diagnose") + 1])) / 1e3


def main():
    binary, replay, runs, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    start = python_start_cost(runs)
    print(f"Python start + import of event_accumulator (in no column): {start:.3f} s (median)")
    print()
    print("| event file | size | scalars | EventAccumulator in-process (s) "
          "| `contrai doctor --json` whole process (s) | speed-up | contrai library in-process (s) "
          "| speed-up in-process |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for f in files:
        size = os.path.getsize(f)
        tb_t, ct_t, lib_t, n = [], [], [], 0
        for _ in range(runs):
            t0 = time.perf_counter()
            n = tb_read(f)
            tb_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            contrai_read(binary, f)
            ct_t.append(time.perf_counter() - t0)
            lib_t.append(replay_ms(replay, f))
        tb_m, ct_m = statistics.median(tb_t), statistics.median(ct_t)
        lib_m = statistics.median(lib_t)
        name = os.path.basename(os.path.dirname(f)) + "/" + os.path.basename(f)[:32]
        print(f"| {name} | {size/1e6:.2f} MB | {n} | {tb_m:.4f} | {ct_m:.4f} | {tb_m/ct_m:.1f}x "
              f"| {lib_m:.5f} | {tb_m/max(lib_m, 1e-6):.0f}x |", flush=True)


if __name__ == "__main__":
    main()
