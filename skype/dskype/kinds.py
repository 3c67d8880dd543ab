"""The query kinds beside topk (``range``, ``knn``, ``terms``) and ``until`` on the Spark job.

No pyspark here.  What each piece of the job does with a kind subscription:

* **Staging** (:func:`lower_inputs`): a kind record becomes an ordinary subscribe command whose
  columns place it (``x, y``: the kNN point or the rectangle's centre; ``term_ids``: the
  predicate's operands, unit-length weights; ``k``: 1 for ``range``, whose merge keeps every
  match) and whose ``spec`` column carries the compiled query (:func:`spec_json`: rectangle,
  point, k, postfix program and cover terms as ids of the run's vocabulary).  ``until`` (any
  kind, topk included) becomes an unsubscribe carrying the record at the position of the first
  message with ``t > until``: exactly where the centralized engine ends it (before that message),
  and every replica hears it because the unsubscribe carries the record.
* **Partitions** host the spec in an engine with the query window (``snapshots=True``) and
  report each kind's result as the top-k's entries ``(id, score, seq)`` (:func:`kind_entries`),
  chosen so that the merge stage's one rule, dedupe by id then order by ``(score desc, seq
  desc)`` and cut to ``k``, is each kind's merge: ``range`` ``(message, 0, seq)`` with no cut (the
  union of the replicas' matches, newest first); ``knn`` ``(message, -distance, seq)`` (the merged
  top list: distance ascending, then newest first); ``terms`` ``(term, count, -name rank)``
  (count descending, then term ascending).
* **Results**: :func:`result_objects` turns those entries back into each kind's results record.

**Which method serves which kind** (the methods' capability rows, :func:`refuse`).  A replicated subscription's
merged result is exact when every (query, message) pair that can be in its result meets in some
partition (then the message is in that replica's local result: a replica sees a subset of the
window, so a message ranks there at least as high as globally; the union of the local lists
therefore holds the global list).  ``hashing`` and ``location`` send every message to every
partition and each subscription to one: every pair meets, every kind is exact.  So do the
adaptive methods (``agrid``, ``kdt``, ``qt``, ``aqwa``), whose pipelines route everywhere and host
each subscription on its owner only; a hand-over re-registers a kind subscription on its new
owner over the whole window, as it does a topk one (:mod:`skype.dskype.handover`).  ``keyword``,
``prefix``, ``spatial-first`` and ``keyword-first`` (routed in exact mode: every term of a
subscription places it, every term of a message routes it, the location levels broadcast
messages) make a subscription and a message meet when they share a term.  A ``range`` or ``knn``
match holds one of the predicate's cover terms (a subset of its operands, which place it), so
both are exact when the query has terms; without terms (no text predicate) a match need share no
term, and ``terms`` counts every message inside its rectangle whatever its terms (and a
message reaching several replicas would be counted twice): those are refused (E048).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from skype.errors import InputError
from skype.model import Match, MessageBatch, SubscriptionBatch, TermMatrix
from skype.partitioning import capabilities_of
from skype.queries import QuerySpec
from skype.text import Vocabulary

KINDS = ("range", "knn", "terms")
# what each method serves exactly beside topk (until: every method, every kind) is its capability
# row (skype.partitioning.capabilities): every kind where each subscription is hosted once (the
# adaptive methods on Spark route everywhere and host it where the table version in force puts
# it), range and knn with terms where a text predicate places them
UNBOUNDED_K = 1 << 62  # the merge cut of range subscriptions: none
VOCABULARY_FILE = "vocabulary.json"


# --------------------------------------------------------------------------- specs


def spec_json(spec: QuerySpec) -> str:
    """The compiled query a ``spec`` column carries (floats round-trip exactly)."""
    return json.dumps({"kind": spec.kind, "rect": list(spec.rect), "x": spec.x, "y": spec.y, "k": spec.k,
                       "program": [int(t) for t in spec.program], "cover": [int(t) for t in spec.cover]},
                      allow_nan=False)


def spec_from_json(sub_id: int, text: str) -> QuerySpec:
    """The :class:`QuerySpec` of a ``spec`` column (``until`` is the stream's: see module docstring)."""
    try:
        d = json.loads(text)
        if d["kind"] not in KINDS:
            raise ValueError(f"kind {d['kind']!r}")
        return QuerySpec(d["kind"], id=int(sub_id), rect=tuple(float(v) for v in d["rect"]),  # type: ignore[arg-type]
                         x=float(d["x"]), y=float(d["y"]), k=int(d["k"]),
                         program=np.array(d["program"], np.int64), cover=np.array(d["cover"], np.int64))
    except (ValueError, KeyError, TypeError) as err:
        raise InputError("E051", id=sub_id, detail=str(err), record_id=sub_id) from None


def _lowered_row(spec: QuerySpec, bounds) -> SubscriptionBatch:
    """The command columns that place a kind subscription (see module docstring)."""
    if spec.kind == "knn":
        x, y = spec.x, spec.y
    else:  # the rectangle's centre, inside the space (a rectangle may reach past it)
        x = min(max((spec.rect[0] + spec.rect[2]) / 2, bounds.minx), bounds.maxx)
        y = min(max((spec.rect[1] + spec.rect[3]) / 2, bounds.miny), bounds.maxy)
    operands = np.unique(spec.program[spec.program >= 0]).astype(np.int64)
    weights = np.full(len(operands), 1.0 / math.sqrt(len(operands)) if len(operands) else 0.0)
    k = spec.k if spec.kind != "range" else 1
    return SubscriptionBatch(np.array([spec.id], np.int64), np.array([x]), np.array([y]), np.array([k], np.int64),
                             np.array([0.5]), TermMatrix(np.array([0, len(operands)]), operands, weights))


# --------------------------------------------------------------------------- refusals


def kinds_used(inputs) -> dict[str, bool]:
    """Kind -> whether some subscription of that kind has no terms (range and knn)."""
    from skype import queries

    used: dict[str, bool] = {}
    for sub in list(inputs.others) + [p for op, p in inputs.steps if op == "ksub"]:
        _, kind, fields = queries.subscription_fields(sub)
        bare = kind in ("range", "knn") and fields.get("text") is None and fields.get("terms") is None
        bare = bare and (fields.get("match", "any") in ("any", "all"))
        used[kind] = used.get(kind, False) or bare
    return used


def refuse(inputs, methods: Iterable[str], open_end: bool = False) -> None:
    """Raise E048 naming the first (kind, method) the job cannot serve exactly (E135 for a snapshot
    query: :func:`skype.dskype.snapshots.refuse`).  ``open_end``: the
    run may stop before the stream's end (an open stream, ``--stop-after-batches``, ``--timeout``),
    so its final results would be folded from events, which carry a ``terms`` entry's count when
    it entered, not its later changes: ``terms`` is refused then."""
    from skype.dskype import snapshots

    methods = list(methods)
    snapshots.refuse(inputs, methods)  # E135: per method, the snapshot queries it answers exactly
    used = kinds_used(inputs)
    if open_end and "terms" in used:
        raise InputError("E048", where="distributed on a stream it may not finish (open stream, "
                         "--stop-after-batches or --timeout)", kind="terms",
                         supported="topk, range, knn (terms: a staged stream run to its end)")
    for method in methods:
        caps = capabilities_of(method)
        for kind in sorted(KINDS, key=lambda k: k in caps.kinds_with_terms):  # terms first
            if kind in caps.kinds:
                continue
            if kind not in caps.kinds_with_terms:
                if kind in used:
                    raise InputError("E048", where=f"distributed (method {method})", kind=kind,
                                     supported=caps.served())
            elif used.get(kind):
                raise InputError("E048", where=f"distributed (method {method})", kind=f"{kind} without terms",
                                 supported=caps.served())


# --------------------------------------------------------------------------- staging


@dataclasses.dataclass
class Lowered:
    """A workload as topk-shaped inputs plus the ``spec`` of each kind command (by command row)."""

    inputs: object
    specs: dict[int, str]  # id(SubscriptionBatch part) -> spec JSON (one-row parts of kind records)
    kinds: dict[int, str]  # subscription id -> kind of its last record
    asked: list = dataclasses.field(default_factory=list)  # snapshot queries by ordinal (skype.dskype.snapshots)


def lower_inputs(inputs) -> Lowered:
    """Kind records -> subscribe commands with a spec; ``until`` -> unsubscribe steps (see module
    docstring).  ``inputs`` is not changed; its vocabulary may grow by query terms no message holds."""
    from skype import queries
    from skype.dskype import snapshots
    from skype.partitioning.registry import concat_subscriptions

    specs: dict[int, str] = {}
    kinds: dict[int, str] = {}
    pending: list[tuple[float, int, int]] = []  # (until, id, generation): the next ends
    generation: dict[int, int] = {}

    def lower(sub) -> SubscriptionBatch:
        spec = queries.compile_subscription(sub, inputs.vocabulary, inputs.bounds, -math.inf)
        assert spec.id is not None
        row = _lowered_row(spec, inputs.bounds)
        specs[id(row)] = spec_json(spec)
        kinds[spec.id] = spec.kind
        live(spec.id, spec.until)
        return row

    def live(sid: int, until: float | None) -> None:
        generation[sid] = generation.get(sid, 0) + 1
        if until is not None:
            heapq.heappush(pending, (until, sid, generation[sid]))

    def topk(batch: SubscriptionBatch) -> SubscriptionBatch:
        until = batch.meta.get("until")
        for i, sid in enumerate(batch.ids.tolist()):
            kinds[int(sid)] = "topk"
            live(int(sid), float(until[i]) if until is not None and not np.isnan(until[i]) else None)
        return SubscriptionBatch(batch.ids, batch.x, batch.y, batch.k, batch.alpha, batch.terms)

    first = [topk(inputs.subscriptions)] + [lower(s) for s in inputs.others]
    steps: list[tuple[str, object]] = []
    times: list[np.ndarray] = []  # the timestamps of the messages so far (snapshot queries' clocks)
    position = 0
    asked: list[dict] = []
    for op, payload in inputs.steps:
        if op == "msgs":
            if len(payload):
                times.append(np.asarray(payload.t, np.float64))
            position += len(payload)
            steps.extend(_split_at_untils(payload, pending, generation))
        elif op == "query":  # compiled now, in stream order: new terms get simulate's ids
            spec, meta = snapshots.lower_query(payload, len(asked), inputs.vocabulary, inputs.bounds, position, times)
            asked.append(meta)
            steps.append(("query", spec))
        elif op == "sub":
            steps.append(("sub", topk(payload)))
        elif op == "ksub":
            steps.append(("sub", lower(payload)))
        elif op == "unsub":
            generation[int(payload)] = generation.get(int(payload), 0) + 1
            steps.append((op, payload))
        else:
            steps.append((op, payload))
    initial = concat_subscriptions(first) if len(first) > 1 else first[0]
    if len(first) > 1:  # the initial kind rows keep their specs through the concatenation
        offset = len(first[0])
        for part in first[1:]:
            specs[_row_key(initial, offset)] = specs.pop(id(part))
            offset += len(part)
    lowered = dataclasses.replace(inputs, subscriptions=initial, others=[], steps=steps)
    return Lowered(lowered, specs, kinds, asked)


def _row_key(batch: SubscriptionBatch, row: int) -> int:
    """Key of row ``row`` of the initial batch in :attr:`Lowered.specs` (negative: never an id())."""
    return -1 - row


def _split_at_untils(batch: MessageBatch, pending: list, generation: dict[int, int]) -> list[tuple[str, object]]:
    """``batch`` cut before each message that ends a subscription (``t > until``), with the ends."""
    out: list[tuple[str, object]] = []
    start = 0
    while pending and start < len(batch):
        until, sid, gen = pending[0]
        if generation.get(sid) != gen:
            heapq.heappop(pending)
            continue
        cut = int(np.searchsorted(batch.t, until, side="right"))
        if cut >= len(batch):
            break
        heapq.heappop(pending)
        if cut > start:
            out.append(("msgs", batch.slice(start, cut)))
            start = cut
        generation[sid] = gen + 1
        out.append(("unsub", sid))
    if start < len(batch):
        out.append(("msgs", batch.slice(start, len(batch)) if start else batch))
    return out


def spec_column(lowered: Lowered, parts: list[SubscriptionBatch]) -> list[str | None]:
    """The ``spec`` of each command row of staging's command parts, in order (part 0 is the
    initial batch; a kind record's later subscribe is its own one-row part; unsubscribes need none)."""
    out: list[str | None] = [lowered.specs.get(_row_key(parts[0], r)) for r in range(len(parts[0]))]
    for part in parts[1:]:
        out.append(lowered.specs.get(id(part)))
        out.extend([None] * (len(part) - 1))
    return out


def write_vocabulary(path: Path, vocabulary: Vocabulary) -> None:
    """The run's term names by id: the partitions' engines order ``terms`` results by name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([vocabulary.term(i) for i in range(len(vocabulary))]))


def read_vocabulary(path: str) -> Vocabulary:
    vocab = Vocabulary()
    for name in json.loads(Path(path).read_text()):
        vocab.id(name)
    return vocab


# --------------------------------------------------------------------------- results


def kind_entries(engine, kind: str, sub_id: int, window_seq, name_rank) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A hosted kind subscription's current result as merge entries ``(ids, scores, seqs)``."""
    result = engine.result(sub_id)
    if kind == "range":
        ids = np.array(result, np.int64)
        return ids, np.zeros(len(ids)), window_seq(ids)
    if kind == "knn":
        ids = np.array([n.id for n in result], np.int64)
        return ids, -np.array([n.distance for n in result], np.float64), window_seq(ids)
    vocab = engine.vocabulary
    ids = np.array([vocab.get(e.term) for e in result], np.int64)
    return ids, np.array([e.count for e in result], np.float64), -name_rank(ids)


def result_arrays(engine, specs: list, sub_ids: np.ndarray, window_seq, name_rank):
    """Hosted subscriptions' current results as CSR ``(indptr, ids, scores, seqs)``: topk lists
    from the core in one call when every spec is None, else one by one (kinds as merge entries)."""
    if all(spec is None for spec in specs):
        indptr, ids, scores = engine.topk_arrays(sub_ids)
        return indptr, ids, scores, window_seq(ids)
    lists = []
    for sid, spec in zip(sub_ids.tolist(), specs):
        if spec is None:
            _, ids, scores = engine.topk_arrays(np.array([sid], np.int64))
            lists.append((ids, scores, window_seq(ids)))
        else:
            lists.append(kind_entries(engine, engine.kind_of(sid), sid, window_seq, name_rank))
    indptr = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(e[0]) for e in lists], out=indptr[1:])
    if not indptr[-1]:
        return indptr, np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
    return (indptr, np.concatenate([e[0] for e in lists]).astype(np.int64),
            np.concatenate([e[1] for e in lists]).astype(np.float64),
            np.concatenate([e[2] for e in lists]).astype(np.int64))


class NameRanks:
    """Rank of each term id in name (code point) order, recomputed when the vocabulary grows."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self._rank = np.zeros(0, np.int64)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        if len(self._rank) < len(self.vocabulary):
            names = [self.vocabulary.term(i) for i in range(len(self.vocabulary))]
            order = sorted(range(len(names)), key=names.__getitem__)
            self._rank = np.empty(len(names), np.int64)
            self._rank[np.array(order, np.int64)] = np.arange(len(names))
        return self._rank[np.asarray(ids, np.int64)]


def result_objects(results: Iterable[tuple[int, list[Match]]], kinds: dict[int, str],
                   vocabulary: Vocabulary | None) -> Iterator[dict]:
    """Final results of every kind (``simulate --results-out``'s records) from merge entries."""
    from skype import io
    from skype.queries import Neighbor, TermCount

    for sid, entries in results:
        kind = kinds.get(int(sid), "topk")
        if kind == "range":
            answer: list = [m.id for m in entries]
        elif kind == "knn":
            answer = [Neighbor(m.id, -m.score) for m in entries]
        elif kind == "terms":
            assert vocabulary is not None  # terms subscriptions come with their workload's vocabulary
            answer = [TermCount(vocabulary.term(m.id), int(m.score)) for m in entries]
        else:
            answer = entries
        yield {"id": int(sid), io.RESULT_FIELD[kind]: io.answer_entries(kind, answer)}


def kind_map(inputs) -> dict[int, str]:
    """Subscription id -> kind of its last record (ids without an entry are topk)."""
    from skype import queries

    out: dict[int, str] = {}
    for sub in inputs.others:
        out[int(sub.id)] = queries.subscription_fields(sub)[1]
    for op, payload in inputs.steps:
        if op == "sub":
            out.update({int(s): "topk" for s in payload.ids.tolist()})
        elif op == "ksub":
            out[int(payload.id)] = queries.subscription_fields(payload)[1]
    return {sid: kind for sid, kind in out.items() if kind != "topk"}


def engine_options(inputs) -> dict:
    """Options the partitions' engines need for ``inputs``: the query window for the kinds and
    the snapshot queries."""
    return {"snapshots": True} if kinds_used(inputs) or any(op == "query" for op, _ in inputs.steps) else {}
