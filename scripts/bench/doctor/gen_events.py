"""Writes a large TensorBoard event file with TensorBoard's own writer (simple_value scalars).

usage: gen_events.py OUT_DIR [STEPS]  -> OUT_DIR/events.out.tfevents.*  (4 tags x STEPS + val)
"""
import math
import random
import sys

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter


def main():
    out = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50_000
    rng = random.Random(42)
    w = EventFileWriter(out, max_queue_size=10_000, flush_secs=3600)
    peak, warm = 3e-4, int(0.03 * steps)
    for s in range(steps):
        lr = peak * (s + 1) / warm if s < warm else 0.1 * peak + 0.9 * peak * 0.5 * (
            1 + math.cos(math.pi * (s - warm) / (steps - warm)))
        loss = (0.4 + 2.0 * math.exp(-s / (steps / 6))) * (1 + 0.03 * rng.uniform(-1, 1))
        vals = [
            summary_pb2.Summary.Value(tag="train/loss", simple_value=loss),
            summary_pb2.Summary.Value(tag="train/lr", simple_value=lr),
            summary_pb2.Summary.Value(tag="train/grad_norm", simple_value=1.5 * (1 + 0.1 * rng.uniform(-1, 1))),
            summary_pb2.Summary.Value(tag="train/accuracy", simple_value=1 - loss / 3),
        ]
        if s % 50 == 49:
            vals.append(summary_pb2.Summary.Value(tag="val/loss", simple_value=loss * 1.1))
        # One event per scalar, as SummaryWriter.add_scalar writes them.
        for v in vals:
            w.add_event(event_pb2.Event(step=s, wall_time=1.7e9 + s, summary=summary_pb2.Summary(value=[v])))
    w.close()


if __name__ == "__main__":
    main()
