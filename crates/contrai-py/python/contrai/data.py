"""The training data as the lifecycle needs it in a running job: a dataset whose samples the
conductor can drop (the loader a resumed job continues mid-epoch is in :mod:`contrai.loader`).
Nothing here needs torch. The audit's first pass over Ray Data is :mod:`contrai.integrations.ray`;
its functions are importable from here too, as they were."""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence


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
        if self._fetched is not None and _in_this_process():
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


def _in_this_process() -> bool:
    """Not inside a ``DataLoader`` worker. Only a training loop watches, so torch is loaded by
    then; the import here keeps the module free of torch for the tools that need none."""
    from torch.utils.data import get_worker_info

    return get_worker_info() is None


from contrai.integrations.ray import near_duplicate_clusters as near_duplicate_clusters  # noqa: E402
from contrai.integrations.ray import signatures as signatures  # noqa: E402  (here before integrations)
