"""The layout of ``Engine.export_state`` and the checks ``Engine.import_state`` makes of it.

An engine state is a mapping of one-dimensional numpy arrays (:data:`STATE_ARRAYS`: name ->
dtype and the length it follows): the top-k subscriptions as the core's table holds them (ids,
location, k, alpha, ``until``, terms as CSR with unit weights, ascending term ids), their result
buffers' records (the cost model's fields, the threshold; ``age`` is the arrival count since the
buffer's last re-evaluation) and entries (CSR: the message as its position in the window, oldest
first; score; dominance counter), and the window's message ids, oldest first.  Invariants a
state must keep to be imported (:func:`checked_state`, before anything changes): every array of
its dtype and length; the version, the buffer kind (an index into ``skype.engine.BUFFERS``) and
the buffers' parameters (kmax, the Skyband ratio, the cost model's: ``Engine.buffer_params``) the
engine's; CSR offsets from 0 to the end, never decreasing; ids unique; fields in range;
each buffer's entries inside the window and in ranking order (score descending, the newer
message first among equal scores).  That the window is the engine's is checked by the engine.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from skype._core.bufstore import entries_fit
from skype.errors import InputError

ENGINE_STATE_VERSION = 1  # Engine.export_state's layout
# its arrays: name -> dtype, and what their length follows ("subs", "terms", "entries", "window",
# "params", 1)
STATE_ARRAYS = {
    "version": (np.int64, 1), "buffer": (np.int64, 1), "buffer_params": (np.float64, "params"),
    "window_ids": (np.int64, "window"),
    "ids": (np.int64, "subs"), "x": (np.float64, "subs"), "y": (np.float64, "subs"), "k": (np.int64, "subs"),
    "alpha": (np.float64, "subs"), "until": (np.float64, "subs"), "term_indptr": (np.int64, "subs+1"),
    "term_ids": (np.uint32, "terms"), "term_weights": (np.float64, "terms"), "complete": (np.uint8, "subs"),
    "cq": (np.float32, "subs"), "refresh_at": (np.uint32, "subs"), "p_theta": (np.float32, "subs"),
    "age": (np.uint32, "subs"), "admits": (np.uint32, "subs"), "retune_at": (np.uint32, "subs"),
    "theta": (np.float64, "subs"), "entry_indptr": (np.int64, "subs+1"), "entry_pos": (np.uint32, "entries"),
    "entry_score": (np.float64, "entries"), "entry_dc": (np.uint16, "entries"),
}


def checked_state(state: Mapping[str, np.ndarray], buffer: int, buffer_params: np.ndarray,
                  vocabulary_size: int) -> dict[str, np.ndarray]:
    """``Engine.import_state``'s checks of an exported state, all before anything changes: every
    array present with its dtype and length, the version and buffer kind, CSR offsets, the
    subscriptions' fields in range, and each buffer's entries inside the window, in ranking
    order (score descending; among equal scores the newer message first)."""
    def bad(detail: str) -> InputError:
        return InputError("E160", detail=detail)

    if not isinstance(state, Mapping):
        raise bad(f"a mapping of arrays, got {type(state).__name__}")
    missing = sorted(set(STATE_ARRAYS) - set(state))
    if missing:
        raise bad(f"arrays {', '.join(missing)} are missing")
    a = {name: np.ascontiguousarray(state[name]) for name in STATE_ARRAYS}
    for name, (dtype, _) in STATE_ARRAYS.items():
        if a[name].dtype != dtype or a[name].ndim != 1:
            raise bad(f"{name} is {a[name].dtype} with {a[name].ndim} dimensions, expected one of {np.dtype(dtype)}")
    if a["version"].tolist() != [ENGINE_STATE_VERSION]:
        raise bad(f"version {a['version'].tolist()}, this engine reads {ENGINE_STATE_VERSION}")
    if len(a["buffer"]) != 1 or int(a["buffer"][0]) != buffer:
        raise bad(f"buffer kind {a['buffer'].tolist()}, this engine's is {buffer} (indexes into skype.engine.BUFFERS)")
    if not np.array_equal(a["buffer_params"], buffer_params):
        raise bad(f"buffer parameters {a['buffer_params'].tolist()}, this engine's are {buffer_params.tolist()}")
    n, nt, ne = len(a["ids"]), len(a["term_ids"]), len(a["entry_pos"])
    sizes = {"subs": n, "subs+1": n + 1, "terms": nt, "entries": ne, "window": len(a["window_ids"]),
             "params": len(buffer_params), 1: 1}
    for name, (_, length) in STATE_ARRAYS.items():
        if len(a[name]) != sizes[length]:
            raise bad(f"{name} holds {len(a[name])} values, expected {sizes[length]}")
    for ptr, total in (("term_indptr", nt), ("entry_indptr", ne)):
        p = a[ptr]
        if p[0] != 0 or p[-1] != total or (np.diff(p) < 0).any():
            raise bad(f"{ptr} is not the offsets of {total} values")
    if len(np.unique(a["ids"])) != n:
        raise bad("a subscription id appears twice")
    if not (np.isfinite(a["x"]).all() and np.isfinite(a["y"]).all()):
        raise bad("a location is not finite")
    if n and ((a["k"] < 1).any() or (a["k"] > np.iinfo(np.int32).max).any()):
        raise bad("a k is not a positive 32-bit integer")
    if not ((a["alpha"] >= 0) & (a["alpha"] <= 1)).all():
        raise bad("an alpha is outside [0, 1]")
    lengths = np.diff(a["term_indptr"])
    if n and lengths.max() > 1000:
        raise bad("a subscription has more than 1000 terms")
    if nt and (int(a["term_ids"].max()) >= vocabulary_size or not np.isfinite(a["term_weights"]).all()
               or (a["term_weights"] <= 0).any()):
        raise bad("a term id is outside the vocabulary or a weight is not positive")
    rows = np.repeat(np.arange(n), lengths)
    if nt > 1 and ((np.diff(a["term_ids"].astype(np.int64)) <= 0) & (rows[1:] == rows[:-1])).any():
        raise bad("a subscription's terms are not in ascending order")
    if not (np.isfinite(a["theta"]).all() and (a["theta"] >= 0).all()):
        raise bad("a threshold is not finite and >= 0")
    bad_row = entries_fit(a["entry_indptr"], a["entry_pos"], a["entry_score"], len(a["window_ids"]))
    if bad_row >= 0:
        raise bad(f"the buffer of subscription {int(a['ids'][bad_row])} names a message outside the window, "
                  f"or a score not finite, or is not in ranking order")
    return a
