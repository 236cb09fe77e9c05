"""The data loader a job resumed mid-epoch continues exactly where the stopped one left off."""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, Sampler

from contrai.resume import bytes_tensor, text_of


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
