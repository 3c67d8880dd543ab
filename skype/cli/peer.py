"""``generate``'s options for peer-style workloads: subscription kinds, rectangles, snapshot
query streams (``skype.data.peer_workloads``; ``docs/queries.md``)."""

from __future__ import annotations

import argparse
from typing import Any, Iterator

import numpy as np

from skype import io
from skype.data.peer_workloads import parse_kinds, peer_queries, peer_subscriptions
from skype.errors import InputError


def _kinds_arg(text: str) -> dict[str, float]:
    try:
        return parse_kinds(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_peer_generate_args(g: argparse.ArgumentParser) -> None:
    p = g.add_argument_group("peer-style kinds and snapshot queries (docs/queries.md)")
    p.add_argument("--sub-kinds", type=_kinds_arg, default={"topk": 1.0}, metavar="KINDS",
                   help="subscription kinds and shares: 'range', 'topk,range,knn,terms' (equal shares) or "
                        "'topk=1,range=3' (default: topk)")
    p.add_argument("--rect-area", type=float, default=0.01,
                   help="range and terms rectangles: this fraction of the space's area around a sampled "
                        "message (default: %(default)s)")
    p.add_argument("--match", default="any", help="predicate of range and knn records: any or all (default: any)")
    p.add_argument("--queries", type=int, default=0, help="snapshot queries spread over --events-out (default: 0)")
    p.add_argument("--query-kinds", type=_kinds_arg, default={"range": 1.0, "knn": 1.0, "terms": 1.0, "topk": 1.0},
                   metavar="KINDS", help="kinds of the snapshot queries (default: all four, equal shares)")
    p.add_argument("--query-last", type=float, help="'last' (seconds) of every snapshot query (default: none)")
    p.add_argument("--events-out", metavar="FILE",
                   help="the stream as one events file: the messages and the snapshot queries, or with --drift "
                        "the drifted stream (sub/unsub/msg events)")


def kind_objects(others: list) -> Iterator[dict[str, Any]]:
    """Range, knn and terms subscriptions as file records."""
    for s in others:
        rec: dict[str, Any] = {"id": s.id, "kind": s.kind}
        if s.kind in ("range", "terms"):
            rec["rect"] = [float(v) for v in s.rect]
        if s.kind == "knn":
            rec.update(x=s.x, y=s.y)
        if s.kind in ("knn", "terms"):
            rec["k"] = s.k
        if s.kind in ("range", "knn"):
            rec.update(terms={t: 1.0 for t in s.terms}, match=s.match)
        yield rec


def peer_generate(args: argparse.Namespace, w) -> tuple[Iterator[dict[str, Any]], list[tuple[str, str]]]:
    """The subscription records of ``w`` shaped by ``--sub-kinds``, and writes ``--events-out``;
    returns (subscription records, report rows)."""
    rng = np.random.default_rng(np.random.SeedSequence(args.seed).spawn(3)[2])
    rows: list[tuple[str, str]] = []
    if list(args.sub_kinds) == ["topk"]:
        records: Iterator[dict[str, Any]] = io.subscription_objects(w.subscriptions, w.vocabulary)
    else:
        topk, others = peer_subscriptions(w.messages, w.vocabulary, args.num_subs, rng, kinds=args.sub_kinds,
                                          area=args.rect_area, sub_terms=args.sub_terms, k=args.k, match=args.match)
        records = _merge_by_id(io.subscription_objects(topk, w.vocabulary), kind_objects(others))
        rows.append(("kinds", ", ".join(f"{k}={v:g}" for k, v in args.sub_kinds.items())))
    if args.events_out:
        queries = peer_queries(w.messages, w.vocabulary, args.queries, rng, kinds=args.query_kinds,
                               area=args.rect_area, sub_terms=args.sub_terms, k=args.k, match=args.match,
                               last=args.query_last)
        after = np.sort(rng.integers(1, len(w.messages) + 1, size=len(queries)))
        n = io.write_objects(args.events_out, _events(w, queries, after))
        rows.append(("events", f"{n} ({len(queries)} snapshot queries) -> {args.events_out}"))
    elif args.queries:
        raise InputError("E023", what="--queries", expected="used with --events-out", value=args.queries)
    return records, rows


def _merge_by_id(a: Iterator[dict], b: Iterator[dict]) -> Iterator[dict]:
    yield from sorted(list(a) + list(b), key=lambda r: r["id"])


def _events(w, queries: list[dict], after: np.ndarray) -> Iterator[dict[str, Any]]:
    q = 0
    for i, msg in enumerate(io.message_objects(w.messages, w.vocabulary)):
        yield {"op": "msg", **msg}
        while q < len(queries) and after[q] == i + 1:
            yield queries[q]
            q += 1
