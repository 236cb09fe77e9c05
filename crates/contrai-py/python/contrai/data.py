"""The training data as the lifecycle needs it in a running job: a dataset whose samples the
conductor can drop, and a data loader a resumed job continues mid-epoch."""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Sampler, get_worker_info

from .resume import bytes_tensor, text_of


class DroppableDataset:
    """Wraps a map-style dataset so that the noisiest samples can be taken out of training.

    Samplers keep drawing indices ``0 .. len - 1``; a dropped index is served as the next kept
    one, so a dropped sample is never trained on again (and a few kept ones appear twice in an
    epoch). Wrap the train dataset before building the trainer:
    ``Trainer(train_dataset=DroppableDataset(train), ...)``.
    """

    def __init__(self, dataset: Sequence[Any]) -> None:
        self.dataset = dataset
        self.dropped: list[int] = []
        self._serve = list(range(len(dataset)))
        # The rows this process fetched since `watch()`, oldest first (None: not watching).
        self._fetched: deque[int] | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:
        row = self._serve[i]
        if self._fetched is not None and get_worker_info() is None:
            self._fetched.append(row)
        return self.dataset[row]

    def watch(self) -> None:
        """From now on, note each row this process fetches — a training loop's, in the order its
        loader draws them — for :meth:`take` to hand out batch by batch (spike triage tells a
        data cause by them); what was noted before is forgotten."""
        self._fetched = deque()

    def unwatch(self) -> None:
        """No more noting (the training loop is over)."""
        self._fetched = None

    def take(self, n: int) -> list[int] | None:
        """The next ``n`` rows fetched (a micro-batch's, in the original numbering), or ``None``
        when fewer were: a loader whose worker processes fetch (``num_workers > 0``) shows this
        process nothing, and what was noted is forgotten, its order lost."""
        fetched = self._fetched
        if fetched is None or len(fetched) < n:
            if fetched is not None:
                fetched.clear()
            return None
        return [fetched.popleft() for _ in range(n)]

    def drop(self, rows: Sequence[int]) -> None:
        """From now on, serve every index in ``rows`` as a kept sample instead (all rows dropped
        so far: the call is idempotent)."""
        n = len(self.dataset)
        gone = set(rows)
        if len(gone) >= n:
            raise ValueError(f"cannot drop all {n} training samples")
        self.dropped = sorted(gone)
        kept = [i for i in range(n) if i not in gone]
        self._serve = []
        k = 0
        for i in range(n):
            if i in gone:
                self._serve.append(kept[k % len(kept)])
                k += 1
            else:
                self._serve.append(i)

    def original(self, i: int) -> Any:
        """Sample ``i`` as it is, dropped or not (per-sample losses are measured on all)."""
        return self.dataset[i]

    def __getattr__(self, name: str) -> Any:
        # Trainers inspect dataset attributes (column names ...): those of the wrapped one.
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)


class ResumableLoader(DataLoader[Any]):
    """A ``DataLoader`` that a job resumed mid-epoch continues exactly where the stopped one left
    off: the same order, the batches it trained passed over without loading them. Built as any
    ``DataLoader`` (``ResumableLoader(data, batch_size=16, shuffle=True)``).

    Lightning keeps its :meth:`state_dict` in every checkpoint (a loader with ``state_dict`` and
    ``load_state_dict`` is resumable to it) and hands it back on ``fit(ckpt_path=...)``; a plain
    ``DataLoader`` restarts the epoch from its first batch there. The state is the batches handed
    out in the epoch under way and the generators as the epoch began — torch's, and the loader's
    own ``generator=`` when it has one: a shuffling sampler draws its order from them — so the
    resumed epoch draws the same order, and skips what was trained."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handed = 0
        # The generators as the epoch under way began: torch's, the loader's own (or None).
        self._epoch_rng: tuple[str, str | None] | None = None
        # Batches to pass over and the generators to start from, at the next epoch's start.
        self._pending: tuple[int, tuple[str, str | None]] | None = None
        self._skip = 0

    @property
    def _index_sampler(self) -> Any:
        return _Skipping(self, super()._index_sampler)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        pending, self._pending = self._pending, None
        own: torch.Generator | None = self.generator
        if pending is not None:
            rng, mine = pending[1]
            torch.random.set_rng_state(bytes_tensor(rng))
            if own is not None and mine is not None:
                own.set_state(bytes_tensor(mine))
        self._epoch_rng = (text_of(torch.random.get_rng_state()), None if own is None else text_of(own.get_state()))
        self._skip = self._handed = 0 if pending is None else pending[0]
        for batch in super().__iter__():
            self._handed += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """Batches handed out in the epoch under way, and the generators it began with."""
        rng, mine = self._epoch_rng if self._epoch_rng is not None else (None, None)
        return {"batches": self._handed, "rng": rng, "generator": mine}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next epoch's iteration continues the stopped one (nothing when it had ended)."""
        done, rng = int(state.get("batches", 0)), state.get("rng")
        self._pending = (done, (rng, state.get("generator"))) if rng is not None and 0 < done < len(self) else None


class _Skipping(Sampler[Any]):
    """A loader's index sampler whose next pass starts past the loader's ``_skip`` batches (read,
    and cleared, as the pass begins); its length is the whole epoch's."""

    def __init__(self, loader: ResumableLoader, inner: Any) -> None:
        self.loader, self.inner = loader, inner

    def __iter__(self) -> Iterator[Any]:
        skip, self.loader._skip = self.loader._skip, 0
        it = iter(self.inner)
        for _ in range(skip):
            next(it, None)
        yield from it

    def __len__(self) -> int:
        return len(self.inner)
