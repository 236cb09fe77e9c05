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


# ---- the audit's first pass, sharded (Ray Data) ------------------------------------------------

# Salts that keep equal key values of different bands apart when every band's keys share one
# column (a 64-bit coincidence across bands only adds a candidate, which verification drops).
_BAND_SALT = 0x9E3779B97F4A7C15


def signatures(batch: Any, text: str = "text", id: str = "id", num_perm: int = 256, threshold: float = 0.8,
               shingles: bool = False) -> Any:
    """The audit's first pass over one Arrow batch, computed in Rust exactly as ``contrai data
    audit`` computes it: for each row its ``id``, ``content`` (xxh3-128 of the normalised text, 16
    bytes), ``words``, LSH band keys ``bands`` and, with ``shingles``, its shingle hashes. For
    ``ray.data``: ``ds.map_batches(contrai.data.signatures, batch_format="pyarrow")``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    for field, what in ((text, "text"), (id, "id")):
        if field not in batch.column_names:
            hint = " (give each row an id first: the sharded audit names samples by it)" if what == "id" else ""
            raise ValueError(f"no {what} field `{field}` in the batch; its fields: "
                             f"{', '.join(batch.column_names)}{hint}")
    texts = batch.column(text).to_pylist()
    content, words, keys, bands, sh = _core_signatures(texts, num_perm, threshold, shingles)
    # The Rust buffers become Arrow arrays without a Python object a value.
    columns = {"id": pc.cast(batch.column(id), pa.string()),
               "content": pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(texts),
                                                               [None, pa.py_buffer(content)]),
               "words": pa.array(np.frombuffer(words, dtype="<u4")),
               "bands": pa.FixedSizeListArray.from_arrays(pa.array(np.frombuffer(keys, dtype="<u8")), bands)}
    if shingles:
        columns["shingles"] = pa.array(sh, pa.list_(pa.uint64()))
    return pa.table(columns)


def _core_signatures(texts: list[Any], num_perm: int, threshold: float,
                     shingles: bool) -> tuple[bytes, bytes, bytes, int, list[list[int]]]:
    from . import _core

    return _core.signatures([t if isinstance(t, str) else None for t in texts], num_perm, threshold, shingles)


def _band_rows(batch: Any) -> Any:
    """One row a band of each non-empty text: (key, id, content); the band's index salted into
    the key, so that a single ``groupby`` groups every band."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    live = batch.filter(pc.greater(batch["words"], 0))
    n = live.num_rows
    if n == 0:
        return pa.table({"key": pa.array([], pa.uint64()), "id": pa.array([], pa.string()),
                         "content": pa.array([], pa.binary(16))})
    keys = pc.list_flatten(live["bands"]).to_numpy().astype(np.uint64)
    bands = len(keys) // n
    salt = (np.arange(bands, dtype=np.uint64) * np.uint64(_BAND_SALT)).astype(np.uint64)
    salted = keys ^ np.tile(salt, n)
    take = pa.array(np.repeat(np.arange(n), bands))
    return pa.table({"key": pa.array(salted, pa.uint64()), "id": live["id"].take(take),
                     "content": live["content"].take(take)})


def _group_pairs(group: Any) -> Any:
    """The candidate pairs of one band key's group: members with the same text paired with its
    first (``exact``), the first members of different texts paired with each other."""
    import pyarrow as pa

    first: dict[bytes, str] = {}
    out: list[tuple[str, str, bool]] = []
    for i, c in zip(group["id"].to_pylist(), group["content"].to_pylist()):
        if c not in first:
            first[c] = i
        elif first[c] != i:
            out.append((first[c], i, True))
    reps = sorted(first.values())
    out += [(x, y, False) for k, x in enumerate(reps) for y in reps[k + 1:]]
    return pa.table({"a": pa.array([p[0] for p in out], pa.string()),
                     "b": pa.array([p[1] for p in out], pa.string()),
                     "exact": pa.array([p[2] for p in out], pa.bool_())})


def near_duplicate_clusters(ds: Any, text: str = "text", id: str = "id", num_perm: int = 256,
                            threshold: float = 0.8) -> list[list[str]]:
    """The duplicate clusters (two samples or more) of a ``ray.data.Dataset``, the same as
    ``contrai data audit`` finds on the same rows: signatures on every worker
    (:func:`signatures`), the LSH band keys grouped by Ray (``groupby`` on the key), the candidate
    pairs' texts verified by their exact Jaccard similarity, and clusters formed on the driver by
    union-find over the verified pairs only. Each cluster's ids sorted, clusters by first id."""
    from ray.data.expressions import col

    sig = ds.map_batches(signatures, batch_format="pyarrow",
                         fn_kwargs={"text": text, "id": id, "num_perm": num_perm, "threshold": threshold})
    keys = sig.map_batches(_band_rows, batch_format="pyarrow").materialize()
    # Most keys are one text's alone: count them first (a vectorised aggregation), so that the
    # Python pairing runs only on the keys texts share, brought back to their rows by a join.
    shared = keys.groupby("key").count().filter(expr=col("count()") > 1).select_columns(["key"])
    found = (keys.join(shared, "inner", num_partitions=max(1, keys.num_blocks()), on=("key",))
             .groupby("key").map_groups(_group_pairs, batch_format="pyarrow").take_all())
    pairs: dict[tuple[str, str], bool] = {}
    for r in found:
        a, b = sorted((r["a"], r["b"]))
        pairs[a, b] = pairs.get((a, b), False) or bool(r["exact"])
    unsure = sorted(p for p, exact in pairs.items() if not exact)
    needed = {i for pair in unsure for i in pair}
    shingles: dict[str, list[int]] = {}
    if needed:
        wanted = ds.filter(lambda row: str(row[id]) in needed)
        for r in wanted.map_batches(signatures, batch_format="pyarrow",
                                    fn_kwargs={"text": text, "id": id, "num_perm": num_perm,
                                               "threshold": threshold, "shingles": True}).take_all():
            shingles[r["id"]] = list(r["shingles"])
    from . import _core

    similar = _core.jaccard_pairs([(shingles[a], shingles[b]) for a, b in unsure])
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    joined = [p for p, exact in pairs.items() if exact] + [p for p, j in zip(unsure, similar) if j >= threshold]
    for a, b in joined:
        parent[find(a)] = find(b)
    clusters: dict[str, list[str]] = {}
    for x in list(parent):
        clusters.setdefault(find(x), []).append(x)
    return sorted((sorted(c, key=_id_order) for c in clusters.values() if len(c) > 1),
                  key=lambda c: _id_order(c[0]))


def _id_order(i: str) -> tuple[int, int, str]:
    """Ids as the audit orders them: integers numerically first, then the others as strings."""
    return (0, int(i), "") if i.isdigit() else (1, 0, i)
