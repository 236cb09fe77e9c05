"""Preemption inside a PyTorch job: SIGTERM (what Kubernetes and Slurm send before they kill a
job), SIGUSR1 (what Slurm's ``--signal=USR1@120`` sends ahead of time) and SIGINT (Ctrl-C)
stop the job cleanly instead of killing it between checkpoints — as ``contrai train`` does.

=====================================  ==================================================================
moment                                 what happens
=====================================  ==================================================================
a stop signal arrives (a step, an      noted and said once on stderr; the job goes on (an evaluation
evaluation, a save under way)          under way finishes)
the optimizer step under way ends      the ranks agree: an all-reduce of what each got, so a signal that
                                       reached one rank stops them all at the same step (none waits
                                       forever in a collective the others left)
agreed                                 the framework's checkpoint of that step is written with
                                       Contrai's record and sealed (``SHA256SUMS``); the job exits
                                       128 + the signal's number, printing the command that resumes it
a second stop signal                   exits at once, 128 + its number
=====================================  ==================================================================

The handlers are installed when training starts (from the main thread; elsewhere Python cannot)
and the previous ones put back when it ends.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from types import FrameType
from typing import Any, Callable

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


def exit_code(signum: int) -> int:
    """The exit status a shell expects of a process a signal ended: 128 + its number."""
    return 128 + signum


def say(message: str) -> None:
    """A line on stderr, at once (a signal handler's words must not wait in a buffer)."""
    sys.stderr.write(f"[contrai] {message}\n")
    sys.stderr.flush()


class Preemption:
    """The stop signals of one training job: the first noted, a second exits at once."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Handlers for :data:`STOP_SIGNALS` (the previous ones kept); ``False`` off the main
        thread, where Python cannot install them (said on stderr)."""
        if threading.current_thread() is not threading.main_thread():
            say("training runs off the main thread: stop signals are not caught (a SIGTERM kills the job)")
            return False
        for s in STOP_SIGNALS:
            self.previous[s] = signal.signal(s, self.on_signal)
        return True

    def restore(self) -> None:
        """The handlers that were there before :meth:`install`."""
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous.clear()

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            say(f"second stop signal ({name}): exiting now, without a checkpoint")
            os._exit(exit_code(signum))
        self.received = signum
        say(f"{name} received: the step under way finishes, then a checkpoint is written and the job exits "
            f"{exit_code(signum)} (a second signal exits at once)")

    def agreed(self, all_reduce: Callable[[list[float]], list[float]]) -> int | None:
        """The signal every rank stops on, or ``None``: each rank's signals summed over ranks (one
        slot a signal), the first of :data:`STOP_SIGNALS` any rank got. Every rank must call it at
        the same step."""
        mine = [1.0 if self.received == s else 0.0 for s in STOP_SIGNALS]
        total = all_reduce(mine)
        return next((int(s) for s, n in zip(STOP_SIGNALS, total) if n > 0), None)


def resume_command() -> str:
    """The command line that started this job, as a shell takes it: torchrun's when the job runs
    under it (its ranks see only their own ``python script``), else the interpreter's."""
    argv = list(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    if "TORCHELASTIC_RUN_ID" in os.environ:
        argv = ["torchrun", f"--nproc_per_node={os.environ.get('LOCAL_WORLD_SIZE', '1')}", *sys.argv]
    return shlex.join(argv)


def stopped(signum: int, step: int, checkpoint: str, how: str) -> SystemExit:
    """What ends a job stopped by ``signum``: the resume said on stderr, the exit status 128 + n."""
    name = signal.Signals(signum).name
    say(f"stopped by {name} after step {step}: checkpoint {checkpoint} written and sealed; continue with\n"
        f"  {resume_command()}\n"
        f"  ({how})")
    return SystemExit(exit_code(signum))


__all__ = ["Preemption", "STOP_SIGNALS", "exit_code", "resume_command", "stopped"]
