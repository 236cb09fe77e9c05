"""The audit's first pass sharded over Ray Data: each batch's signatures computed in Rust exactly
as ``contrai data audit`` computes them, and the duplicate clusters of a ``ray.data.Dataset``,
the same as the audit's. Ray and pyarrow are imported when a function is called."""

from __future__ import annotations

from typing import Any


def signatures(batch: Any, text: str = "text", id: str = "id", num_perm: int = 256, threshold: float = 0.8,
               edit_share: float = 0.05, fingerprints: bool = False) -> Any:
    """The audit's first pass over one Arrow batch, computed in Rust exactly as ``contrai data
    audit`` computes it: for each row its ``id``, ``content`` (xxh3-128 of the normalised text, 16
    bytes), ``words``, candidate ``keys`` (each salted by its group, 0 where the text has none)
    and, with ``fingerprints``, its hashed ``word_hashes`` and ``shingles`` (what verification
    reads). For ``ray.data``: ``ds.map_batches(contrai.integrations.ray.signatures, batch_format="pyarrow")``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    for field, what in ((text, "text"), (id, "id")):
        if field not in batch.column_names:
            hint = " (give each row an id first: the sharded audit names samples by it)" if what == "id" else ""
            raise ValueError(f"no {what} field `{field}` in the batch; its fields: "
                             f"{', '.join(batch.column_names)}{hint}")
    texts = batch.column(text).to_pylist()
    content, words, keys, votes, prints = _core_signatures(texts, num_perm, threshold, edit_share, fingerprints)
    # The Rust buffers become Arrow arrays without a Python object a value.
    columns = {"id": pc.cast(batch.column(id), pa.string()),
               "content": pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(texts),
                                                               [None, pa.py_buffer(content)]),
               "words": pa.array(np.frombuffer(words, dtype="<u4")),
               "keys": pa.FixedSizeListArray.from_arrays(pa.array(np.frombuffer(keys, dtype="<u8")), len(votes))}
    if fingerprints:
        columns["word_hashes"] = pa.array([w for w, _ in prints], pa.list_(pa.uint64()))
        columns["shingles"] = pa.array([s for _, s in prints], pa.list_(pa.uint64()))
    return pa.table(columns)


def _core_signatures(texts: list[Any], num_perm: int, threshold: float, edit_share: float,
                     fingerprints: bool) -> tuple[bytes, bytes, bytes, list[int], list[tuple[list[int], list[int]]]]:
    from contrai import _core

    return _core.signatures([t if isinstance(t, str) else None for t in texts], num_perm, threshold, edit_share,
                            fingerprints)


def _key_rows(batch: Any, votes: list[int]) -> Any:
    """One row a candidate key of each non-empty text: (key, id, content, words, votes)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    live = batch.filter(pc.greater(batch["words"], 0))
    n = live.num_rows
    keys = pc.list_flatten(live["keys"]).to_numpy().astype(np.uint64) if n else np.array([], np.uint64)
    slots = len(votes)
    has = keys != 0
    take = pa.array(np.repeat(np.arange(n), slots)[has])
    return pa.table({"key": pa.array(keys[has], pa.uint64()), "id": live["id"].take(take),
                     "content": live["content"].take(take), "words": live["words"].take(take),
                     "votes": pa.array(np.tile(np.asarray(votes, np.uint32), n)[has], pa.uint32())})


def _group_pairs(group: Any, edit_share: float) -> Any:
    """The candidate pairs of one key's group, as the audit pairs them (``_core.key_pairs``)."""
    import pyarrow as pa

    from contrai import _core

    rows = _core.key_pairs(group["id"].to_pylist(), group["content"].to_pylist(), group["words"].to_pylist(),
                           int(group["votes"][0].as_py()), edit_share)
    return pa.table({"a": pa.array([r[0] for r in rows], pa.string()),
                     "b": pa.array([r[1] for r in rows], pa.string()),
                     "exact": pa.array([r[2] for r in rows], pa.bool_()),
                     "votes": pa.array([r[3] for r in rows], pa.uint32())})


def near_duplicate_clusters(ds: Any, text: str = "text", id: str = "id", num_perm: int = 256,
                            threshold: float = 0.8, edit_share: float = 0.05) -> list[list[str]]:
    """The duplicate clusters (two samples or more) of a ``ray.data.Dataset``, the same as
    ``contrai data audit`` finds on the same rows: signatures on every worker
    (:func:`signatures`), the candidate keys grouped by Ray (``groupby`` on the key), the
    candidate pairs' texts verified against the near-copy definition in Rust, and clusters formed
    on the driver by union-find over the verified pairs only. Each cluster's ids sorted, clusters
    by first id."""
    from ray.data.expressions import col

    from contrai import _core

    params = {"text": text, "id": id, "num_perm": num_perm, "threshold": threshold, "edit_share": edit_share}
    votes = _core_signatures(["a"], num_perm, threshold, edit_share, False)[3]
    sig = ds.map_batches(signatures, batch_format="pyarrow", fn_kwargs=params)
    keys = sig.map_batches(_key_rows, batch_format="pyarrow", fn_kwargs={"votes": votes}).materialize()
    # Most keys are one text's alone: count them first (a vectorised aggregation), so that the
    # pairing runs only on the keys texts share, brought back to their rows by a join.
    shared = keys.groupby("key").count().filter(expr=col("count()") > 1).select_columns(["key"])
    found = (keys.join(shared, "inner", num_partitions=max(1, keys.num_blocks()), on=("key",))
             .groupby("key").map_groups(_group_pairs, batch_format="pyarrow",
                                        fn_kwargs={"edit_share": edit_share}).take_all())
    pairs: dict[tuple[str, str], tuple[bool, int]] = {}
    for r in found:
        a, b = sorted((r["a"], r["b"]))
        exact, n = pairs.get((a, b), (False, 0))
        pairs[a, b] = (exact or bool(r["exact"]), n + int(r["votes"]))
    # A band of the edit rule alone is one vote: a pair needs two, as in the audit.
    unsure = sorted(p for p, (exact, n) in pairs.items() if not exact and n >= 2)
    needed = {i for pair in unsure for i in pair}
    prints: dict[str, tuple[list[int], list[int]]] = {}
    if needed:
        wanted = ds.filter(lambda row: str(row[id]) in needed)
        for r in wanted.map_batches(signatures, batch_format="pyarrow",
                                    fn_kwargs={**params, "fingerprints": True}).take_all():
            prints[r["id"]] = (list(r["word_hashes"]), list(r["shingles"]))
    similar = _core.near_pairs([(prints[a], prints[b]) for a, b in unsure], threshold, edit_share)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    joined = [p for p, (exact, _) in pairs.items() if exact] + [p for p, ok in zip(unsure, similar) if ok]
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
