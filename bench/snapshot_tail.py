"""Snapshot queries over a large window, query by query: the tail and what makes it.

The workload and queries are ``bench/test_queries.py::test_snapshot``'s (tweets, seed 13 for the
window, seed 14 for the queries, 1%-area rectangles, k = 20), so the percentiles here are that
bench's; this script adds the work counters of each query (``snapshots`` in the engine's stats:
heap pops of ``topk``, terms visited and walks of ``terms``) and lists the slowest queries with
what they have in common (terms, their window counts, ``alpha``).  Times are the querying
thread's CPU time (the machine is shared); the counters are exact and deterministic.

    python bench/snapshot_tail.py --window 1000000 --queries 1000 --kinds topk,terms
    python bench/snapshot_tail.py --window 200000 --queries 300 --kinds topk --slowest 10
    python bench/snapshot_tail.py --kinds terms --cells 64      # finer count tables (4x the memory)
    python bench/snapshot_tail.py --kinds topk --paired floor   # today's topk against it without a design

``--paired NAME`` runs every query twice in one process, once with the design NAME off (the
code before it) and once on, in alternating order, asserts identical answers and reports both
variants' CPU times and counters side by side (``PAIRED``: the designs that can be switched off;
``PAIRED_ENGINES``: settings fixed when the index is built, two engines over the same window).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from skype import Engine
from skype.data import make_workload
from skype.data.peer_workloads import peer_queries

COUNTERS = {"topk": ("topk_work", "topk_reads", "topk_entry_bounds"),
            "terms": ("terms_visits", "terms_walks", "terms_scans")}


def _switch_floor(on: bool) -> None:
    from skype._core.msgindex import set_query_floor

    set_query_floor(on)


def _switch_leaf_constants(on: bool) -> None:
    from skype._core.msgindex import set_leaf_constants

    set_leaf_constants(on)


def _switch_prefetch(on: bool) -> None:
    from skype._core.msgindex import set_prefetch

    set_prefetch(on)


PAIRED = {"floor": _switch_floor, "leaf-constants": _switch_leaf_constants,   # design name -> switch(on)
          "prefetch": _switch_prefetch}
# settings fixed when the index is built: two engines over the same window, "before" the default
PAIRED_ENGINES = {"leaf-capacity-32": {"message_leaf_capacity": 32},
                  "leaf-capacity-128": {"message_leaf_capacity": 128},
                  "leaf-capacity-256": {"message_leaf_capacity": 256}}


def _engine(w, window: int, **settings):
    e = Engine(window=window, vocabulary=w.vocabulary, bounds=w.bounds, snapshots=True, term_trees="eager",
               **settings)
    for chunk in w.messages.batches(20_000):
        e.publish_batch(chunk)
    return e


def _one(e, kind: str, fields: dict) -> tuple[float, list, dict]:
    s0 = e.stats()["queries"]["snapshots"]
    c0 = time.thread_time()
    answer = e.query(kind, **fields)
    cpu_us = (time.thread_time() - c0) * 1e6
    s1 = e.stats()["queries"]["snapshots"]
    return cpu_us, answer, {c: s1[c] - s0[c] for c in COUNTERS[kind]}


def run(window: int, queries: int, kinds: list[str], slowest: int, cells: int = 0, paired: str = "") -> dict:
    if cells:
        from skype.querykinds import CoreQueryKinds

        CoreQueryKinds.SNAPSHOT_TERMS_GRID = (cells, *CoreQueryKinds.SNAPSHOT_TERMS_GRID[1:])
    w = make_workload("tweets", num_subs=1, num_messages=window, seed=13)
    if paired in PAIRED_ENGINES:
        engines = {False: _engine(w, window), True: _engine(w, window, **PAIRED_ENGINES[paired])}
        e = engines[True]
    else:
        e = _engine(w, window)
    window_count = np.bincount(w.messages.terms.ids, minlength=len(w.vocabulary))
    out: dict = {"window": window, "queries": queries}
    for kind in kinds:
        qs = peer_queries(w.messages, w.vocabulary, queries, np.random.default_rng(14), kinds={kind: 1.0},
                          area=0.01, k=20, bounds=w.bounds)
        rows = []
        for i, q in enumerate(qs):
            fields = {k: v for k, v in q.items() if k not in ("op", "qid", "kind")}
            if paired:
                got = {}
                for on in ((False, True) if i % 2 == 0 else (True, False)):
                    if paired in PAIRED:
                        PAIRED[paired](on)
                        got[on] = _one(e, kind, fields)
                    else:
                        got[on] = _one(engines[on], kind, fields)
                if paired in PAIRED:
                    PAIRED[paired](True)
                assert got[False][1] == got[True][1], ("answers differ", q)
                cpu_us, answer, counters = got[True]
                row = {"cpu_us": round(cpu_us, 1), "before_cpu_us": round(got[False][0], 1), "answer": len(answer)}
                row.update(counters)
                row.update({f"before_{c}": v for c, v in got[False][2].items()})
            else:
                cpu_us, answer, counters = _one(e, kind, fields)
                row = {"cpu_us": round(cpu_us, 1), "answer": len(answer)}
                row.update(counters)
            if kind == "topk":
                row.update(alpha=round(fields["alpha"], 3), xy=[round(fields["x"], 3), round(fields["y"], 3)],
                           weights=[round(v, 3) for v in fields["terms"].values()],
                           window_counts=[int(window_count[w.vocabulary.id(t)]) for t in fields["terms"]])
            else:
                row["rect"] = [round(v, 4) for v in fields["rect"]]
            rows.append(row)
        summary: dict = {}
        for prefix in ("before_", "") if paired else ("",):
            us = np.array([r[f"{prefix}cpu_us"] for r in rows])
            summary.update({f"{prefix}p50_us": round(float(np.percentile(us, 50)), 1),
                            f"{prefix}p99_us": round(float(np.percentile(us, 99)), 1),
                            f"{prefix}max_us": round(float(us.max()), 1), f"{prefix}mean_us": round(float(us.mean()), 1)})
            summary.update({f"{prefix}{c}_per_query": round(sum(r[prefix + c] for r in rows) / len(rows), 1)
                            for c in COUNTERS[kind]})
        summary["slowest"] = sorted(rows, key=lambda r: -r["cpu_us"])[:slowest]
        out[kind] = summary
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=1_000)
    ap.add_argument("--kinds", default="topk,terms")
    ap.add_argument("--slowest", type=int, default=12)
    ap.add_argument("--cells", type=int, default=0, help="cells per side of the snapshot terms' count tables "
                    "(default: CoreQueryKinds.SNAPSHOT_TERMS_GRID's)")
    ap.add_argument("--paired", choices=sorted(PAIRED) + sorted(PAIRED_ENGINES), default="",
                    help="each query with the named design off and on, in one process (identical answers asserted)")
    a = ap.parse_args()
    print(json.dumps(run(a.window, a.queries, a.kinds.split(","), a.slowest, a.cells, a.paired), indent=1))


if __name__ == "__main__":
    main()
