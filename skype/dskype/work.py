"""Deterministic work counters of a partition's engine, per batch (the scale-out measure).

Wall-clock seconds of a partition are noisy on a shared machine; the engine's own counters are
not.  :func:`engine_counters` reads the cumulative counters a core engine keeps in ``stats()``
(postings scanned, candidates verified, admissions, re-evaluation work, arrivals, expirations)
and :func:`counter_delta` turns two readings into the work of one batch.  Invariant: a reading is
cumulative for one engine object; when the partition replaces its engine within a batch (a
rebuild), the counters restart, and the delta of a counter that went down is its new value (the
rebuilt engine's work), never negative.  The reference engine has no counters: every value is 0.
"""

from __future__ import annotations

import time
from typing import Any

# name in the metrics row -> path in Engine.stats()
COUNTERS: dict[str, tuple[str, ...]] = {
    "postings": ("dissemination", "entries_visited"),
    "candidates": ("dissemination", "candidates"),
    "admits": ("admits",),
    "reevaluation_work": ("reevaluation_work",),
    "arrivals": ("arrivals",),
    "expirations": ("expirations",),
    "floor_skips": ("floor_skips",),  # admissions skipped below a floor (skype.dskype.floors)
    "floor_repairs": ("floor_repairs",),  # buffers rebuilt because a floor fell below a skipped score
    "floor_readmits": ("floor_readmits",),  # ... repaired from the side list of skipped messages instead
    "floor_readmitted": ("floor_readmitted",),  # skipped messages those re-admitted
    "floor_readmit_work": ("floor_readmit_work",),  # entries the re-admissions' k-skyband passes read
    "floor_refills": ("floor_refills",),  # expiries that re-admitted the side list instead of re-evaluating
}


def engine_counters(engine: Any) -> dict[str, int]:
    """The engine's cumulative work counters (0 where the engine keeps none), plus the CPU time
    of this thread in nanoseconds (``cpu_ns``)."""
    try:
        stats = engine.stats()
    except (AttributeError, KeyError, TypeError):
        stats = {}
    out = {}
    for name, path in COUNTERS.items():
        value: Any = stats
        for key in path:
            value = value.get(key, 0) if isinstance(value, dict) else 0
        out[name] = int(value or 0)
    out["cpu_ns"] = time.thread_time_ns()
    return out


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Per-counter work between two readings (module docstring: a counter that went down restarted).

    >>> counter_delta({"admits": 5, "postings": 9}, {"admits": 8, "postings": 4})
    {'admits': 3, 'postings': 4}
    """
    return {name: (after[name] - before[name]) if after[name] >= before[name] else after[name] for name in after}
