"""`contrai watch` on a 100 MB TensorBoard log with a million-point loss: CPU at rest, and how
fast the page answers and follows.

Writes the log with tensorboardX (the writer Hugging Face's Trainer falls back to; the same
records torch.utils.tensorboard writes): 1,000,000 steps of train/loss and train/learning_rate,
eval/loss every 1,000 steps, one SummaryWriter flushing every 2 minutes as by default. The log is written once and kept in
`--dir` (the steps appended by a run are at the end of the file; delete it to start again). Then starts
`contrai watch DIR --port 0` and measures:

- the first read: seconds until the page shows the last step;
- at rest: the process's CPU time (utime + stime from /proc) over `--rest` seconds, as % of one
  core, `--repeat` windows, median;
- the page: bytes of GET / and its time; a hover's /values time;
- following: a step appended to the 100 MB file (one record, written and closed) until the
  event stream carries it, `--repeat` times.

The anchor, with `--tensorboard PATH` (TensorBoard 2.21's `tensorboard` script): TensorBoard
serving the same log directory, measured the same way — the first read until its scalars API
returns the last step, and its CPU at rest over the same windows (it looks for new events every
5 s by default, and samples a tag down to 1,000 points).

Usage: python at_rest.py --contrai target/release/contrai [--tensorboard venv/bin/tensorboard]
       [--dir /tmp/watch-bench] [--rest 60] [--repeat 3]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def write_log(path: str, steps: int) -> str:
    from tensorboardX import SummaryWriter

    os.makedirs(path, exist_ok=True)
    w = SummaryWriter(path, flush_secs=120)
    for s in range(steps):
        w.add_scalar("train/loss", 2.0 / (1.0 + s / 1000.0), s)
        w.add_scalar("train/learning_rate", 1e-4 * (1 - s / steps), s)
        if s % 1000 == 999:
            w.add_scalar("eval/loss", 2.2 / (1.0 + s / 1000.0), s)
    w.close()
    return next(os.path.join(path, f) for f in os.listdir(path) if f.startswith("events.out.tfevents"))


def append_scalar(log: str, tag: str, value: float, step: int) -> None:
    """Appends one scalar event to an event file and flushes it, as a SummaryWriter's flush does
    (tensorboardX's own records, written at once: its writer's queue flushes when it likes)."""
    import struct

    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.record_writer import masked_crc32c
    from tensorboardX.summary import scalar

    data = Event(wall_time=time.time(), step=step, summary=scalar(tag, value)).SerializeToString()
    header = struct.pack("Q", len(data))
    with open(log, "ab") as f:
        f.write(header + struct.pack("I", masked_crc32c(header)) + data + struct.pack("I", masked_crc32c(data)))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def at_rest(pid: int, a, who: str) -> list:
    """The process's CPU over `a.repeat` windows of `a.rest` seconds, as % of one core."""
    rest = []
    for _ in range(a.repeat):
        c, t = cpu_seconds(pid), time.time()
        time.sleep(a.rest)
        rest.append(100 * (cpu_seconds(pid) - c) / (time.time() - t))
        print(f"{who} at rest: {rest[-1]:.3f} % of a core", file=sys.stderr)
    return rest


def get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        out = b""
        while chunk := s.recv(1 << 20):
            out += chunk
    return out.split(b"\r\n\r\n", 1)[1]


def updates(port: int):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
    f = s.makefile("rb")
    for line in f:
        if line.startswith(b"data: "):
            yield json.loads(line[6:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contrai", required=True)
    ap.add_argument("--dir", default="/tmp/watch-bench")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--rest", type=float, default=60.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tensorboard", help="TensorBoard's script, to measure it the same way")
    a = ap.parse_args()
    log_dir = os.path.join(a.dir, "run")
    existing = [f for f in os.listdir(log_dir)] if os.path.isdir(log_dir) else []
    if existing:
        log = os.path.join(log_dir, existing[0])
    else:
        t = time.time()
        log = write_log(log_dir, a.steps)
        print(f"wrote {log} in {time.time() - t:.0f} s", file=sys.stderr)
    size = os.path.getsize(log)
    last = a.steps - 1
    t0 = time.time()
    proc = subprocess.Popen([a.contrai, "watch", log_dir, "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().split("http://127.0.0.1:")[1].split("/")[0])
        stream = updates(port)
        first_read, seen = None, 0
        for u in stream:
            seen = u["last_step"]
            if seen >= last:
                first_read = time.time() - t0
                break
        time.sleep(2)
        rest = at_rest(proc.pid, a, "contrai watch")
        page_t, page = [], b""
        for _ in range(a.repeat):
            t = time.time()
            page = get(port, "/")
            page_t.append(time.time() - t)
        hover_t = []
        for x in (123_456, 500_000, 999_000):
            t = time.time()
            json.loads(get(port, f"/values?run=0&x={x}"))
            hover_t.append(time.time() - t)
        follow = []
        for i in range(a.repeat):
            step = seen + 1 + i
            t = time.time()
            append_scalar(log, "train/loss", 0.5, step)
            for u in stream:
                if u["last_step"] >= step:
                    follow.append(time.time() - t)
                    break
        result = {
            "log_bytes": size,
            "points_per_series": a.steps,
            "first_read_s": round(first_read, 2),
            "cpu_at_rest_percent_of_a_core": [round(x, 3) for x in rest],
            "cpu_at_rest_median": round(statistics.median(rest), 3),
            "page_bytes": len(page),
            "page_get_s_median": round(statistics.median(page_t), 3),
            "hover_values_s_median": round(statistics.median(hover_t), 4),
            "append_to_page_s": [round(x, 2) for x in follow],
            "append_to_page_s_median": round(statistics.median(follow), 2),
        }
        if a.tensorboard:
            result["tensorboard"] = tensorboard(a, log_dir, last)
        print(json.dumps(result, indent=1))
    finally:
        proc.kill()


def tensorboard(a, log_dir: str, last: int) -> dict:
    """TensorBoard on the same directory: first read and CPU at rest."""
    port = free_port()
    t0 = time.time()
    proc = subprocess.Popen(
        [a.tensorboard, "--logdir", log_dir, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        first_read = None
        while first_read is None and time.time() - t0 < 600:
            time.sleep(0.5)
            try:
                rows = json.loads(get(port, "/data/plugin/scalars/scalars?run=.&tag=train/loss"))
            except (OSError, ValueError):
                continue
            if rows and rows[-1][1] >= last:
                first_read = time.time() - t0
        time.sleep(2)
        rest = at_rest(proc.pid, a, "TensorBoard")
        return {
            "first_read_s": round(first_read, 2) if first_read else None,
            "cpu_at_rest_percent_of_a_core": [round(x, 3) for x in rest],
            "cpu_at_rest_median": round(statistics.median(rest), 3),
        }
    finally:
        proc.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
