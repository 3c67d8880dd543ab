"""A workload: what a run consumes, generated (a dataset) or read from files, validated once.

A workload is either generated (:func:`skype.data.make_workload`, optionally drifted) or read
from files in the public formats (messages and subscriptions, or interleaved events).  Records
are validated once here; with ``on_error="fail"`` (default) the first bad record stops the run
with an error naming it, with ``on_error="skip"`` every rejected record is skipped and counted by
error code.  The result, :class:`Inputs`, holds typed batches: the subscriptions registered
first, then the stream's steps in order.  The command line (:mod:`skype.cli.inputs`) only parses
options into a :class:`WorkloadSpec`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from skype import io, queries, validate
from skype.data.drift import make_drift
from skype.data.streaming import StreamedMessages, TweetsStream
from skype.data.workloads import make_subscriptions, make_workload
from skype.errors import InputError
from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, Subscription, SubscriptionBatch, TermMatrix
from skype.text import Vocabulary, tokenize


@dataclass(frozen=True)
class WorkloadSpec:
    """Where a workload comes from.  Without files (``messages``, ``subscriptions``, ``events``)
    it is the generated ``dataset``; with ``messages`` only, subscriptions are generated over
    them.  ``vocabulary`` (a file) fixes the term ids of file workloads."""

    dataset: str = "geonames"
    num_subs: int = 20_000
    num_messages: int = 50_000
    seed: int = 0
    sub_terms: tuple[int, int] = (1, 3)
    k: int = 20
    sub_keywords: str = "message"
    drift: str = "none"
    drift_start: int = 0
    messages: str | None = None
    subscriptions: str | None = None
    events: str | None = None
    on_error: str = "fail"
    vocabulary: str | None = None
    bounds: Bounds = DEFAULT_BOUNDS


@dataclass
class Inputs:
    """What a run consumes: subscriptions registered first, then the stream of steps."""

    vocabulary: Vocabulary
    subscriptions: SubscriptionBatch
    steps: list[tuple[str, Any]]  # ("msgs", MessageBatch) | ("sub", SubscriptionBatch) | ("unsub", id)
    bounds: Bounds
    description: str
    rejected: Counter = field(default_factory=Counter)
    texts: list[str] | None = None
    others: list = field(default_factory=list)  # range/knn/terms subscriptions registered first
    # steps may also be ("ksub", a range/knn/terms subscription) and ("query", a snapshot record)

    def peer_kinds(self) -> list[str]:
        """What beside plain topk the inputs use: kinds, "snapshot queries", "until"."""
        used = {s.kind for s in self.others} | {p.kind for op, p in self.steps if op == "ksub"}
        if any(op == "query" for op, _ in self.steps):
            used.add("snapshot queries")
        batches = [self.subscriptions] + [p for op, p in self.steps if op == "sub"]
        if any("until" in b.meta for b in batches):
            used.add("topk with until")
        return sorted(used)

    def refuse_peer_kinds(self, where: str) -> None:
        """Raise E048 naming the first kind ``where`` cannot serve (it serves plain topk only)."""
        used = self.peer_kinds()
        if used:
            raise InputError("E048", where=where, kind=used[0], supported="topk subscriptions without until")

    @property
    def num_messages(self) -> int:
        return sum(len(b) for op, b in self.steps if op == "msgs")

    def messages(self) -> MessageBatch:
        return MessageBatch.concat([b.materialize() if isinstance(b, StreamedMessages) else b
                                    for op, b in self.steps if op == "msgs"])

    def steps_upto(self, cursor: tuple[int, int, int], end: int) -> tuple[list[tuple[str, Any]], tuple[int, int, int]]:
        """The steps of a micro-batch that ends after ``end`` messages, from ``cursor`` (step index,
        offset in that step, messages before it; ``(0, 0, 0)`` at the start): message steps cut
        where the batch ends, and every command positioned at ``end`` or earlier.  Returns them
        and the cursor to resume from."""
        i, offset, published = cursor
        out: list[tuple[str, Any]] = []
        while i < len(self.steps):
            op, payload = self.steps[i]
            if op != "msgs":
                out.append((op, payload))
                i += 1
                continue
            take = min(len(payload) - offset, end - published)
            if take > 0:
                out.append((op, payload.slice(offset, offset + take)))
                offset, published = offset + take, published + take
            if offset < len(payload):
                break  # the batch ends inside this step
            i, offset = i + 1, 0
        return out, (i, offset, published)


class _Collector:
    """Validates records one by one, failing fast or skipping and counting."""

    def __init__(self, on_error: str) -> None:
        self.on_error = on_error
        self.rejected: Counter = Counter()

    def reject(self, err: InputError) -> None:
        if self.on_error == "fail":
            raise err
        self.rejected[err.code] += 1

    def accept(self, fn):
        try:
            return fn()
        except InputError as err:
            self.reject(err)
            return None


def _records(path: str, convert, collector: _Collector) -> list[tuple[int, Any]]:
    """All (line, record) of a file that parse; bad ones fail or are skipped and counted."""
    out = []
    for line, obj in io.iter_objects(path, on_malformed=collector.reject):
        def parse(obj=obj, line=line):
            try:
                return convert(obj)
            except InputError as err:
                rid = obj.get("id") if isinstance(obj, dict) else None
                raise err.located(source=path, line=line, record_id=rid) from None

        rec = collector.accept(parse)
        if rec is not None:
            out.append((line, rec))
    return out


def _vocabulary_from(messages: list) -> Vocabulary:
    """Document frequencies over the stream's messages: the sample that fixes the term order."""
    docs = []
    for m in messages:
        if isinstance(m.text, str):
            docs.append(tokenize(m.text))
        elif isinstance(m.terms, dict):
            docs.append([t for t in m.terms if isinstance(t, str)])
    return Vocabulary.build(docs)


class _Builder:
    """Turns validated records into batches, enforcing stream-level rules."""

    def __init__(self, vocab: Vocabulary, bounds: Bounds, collector: _Collector, source: str) -> None:
        self.vocab, self.bounds, self.collector, self.source = vocab, bounds, collector, source
        self.sub_ids: set[int] = set()
        self.last_t = -math.inf
        self.arrivals = 0

    def subscription(self, line: int, sub) -> tuple | None:
        """("topk", row with until) or (kind, the subscription object), or None if rejected."""
        def check():
            try:
                if isinstance(sub, Subscription):
                    row = validate.check_subscription(sub, self.vocab, self.bounds)
                    try:
                        until = queries.check_until(sub.until, self.last_t)
                    except InputError as err:
                        raise err.located(record_id=row[0]) from None
                    sid, out = row[0], ("topk", row + (until,))
                else:
                    spec = queries.compile_subscription(sub, self.vocab, self.bounds, self.last_t)
                    sid, out = spec.id, (spec.kind, sub)
                if sid in self.sub_ids:
                    raise InputError("E007", id=sid, record_id=sid)
            except InputError as err:
                raise err.located(source=self.source, line=line) from None
            self.sub_ids.add(sid)
            return out

        return self.collector.accept(check)

    def query(self, line: int, rec: dict) -> dict | None:
        def check():
            try:
                fields = {k: v for k, v in rec.items() if k not in ("qid", "kind")}
                validate.check_id(rec["qid"])
                queries.compile_query(rec["kind"], fields, self.vocab, self.bounds, self.last_t, snapshot=True)
            except InputError as err:
                raise err.located(source=self.source, line=line, record_id=rec.get("qid")) from None
            return rec

        return self.collector.accept(check)

    def unsubscription(self, line: int, sid) -> int | None:
        def check():
            try:
                i = validate.check_id(sid)
                if i not in self.sub_ids:
                    raise InputError("E008", id=i, record_id=i)
            except InputError as err:
                raise err.located(source=self.source, line=line) from None
            self.sub_ids.discard(i)
            return i

        return self.collector.accept(check)

    def message(self, line: int, msg) -> tuple | None:
        def check():
            try:
                row = validate.check_message(msg, self.vocab, self.bounds, float(self.arrivals))
                if row[3] < self.last_t:
                    raise InputError("E009", t=row[3], prev=self.last_t, record_id=row[0])
            except InputError as err:
                raise err.located(source=self.source, line=line) from None
            self.last_t = row[3]
            self.arrivals += 1
            return row

        return self.collector.accept(check)


def _columns(rows: list[tuple], dtypes: tuple[type, ...]) -> list[np.ndarray]:
    """The first len(dtypes) fields of validated rows, one array per field."""
    return [np.array([row[i] for row in rows], dtype=dt) for i, dt in enumerate(dtypes)]


def _terms(rows: list[tuple], first: int) -> TermMatrix:
    return TermMatrix.from_rows([(row[first], row[first + 1]) for row in rows])


def subscriptions_batch(rows: list[tuple]) -> SubscriptionBatch:
    """Rows (id, x, y, k, alpha, ids, weights[, until]); ``meta["until"]`` (NaN: none) when any
    row has an until."""
    ids, x, y, k, alpha = _columns(rows, (np.int64, np.float64, np.float64, np.int64, np.float64))
    batch = SubscriptionBatch(ids, x, y, k, alpha, _terms(rows, 5))
    until = [r[7] if len(r) > 7 else None for r in rows]
    if any(u is not None for u in until):
        batch.meta["until"] = np.array([np.nan if u is None else u for u in until], dtype=np.float64)
    return batch


def messages_batch(rows: list[tuple]) -> MessageBatch:
    ids, x, y, t = _columns(rows, (np.int64, np.float64, np.float64, np.float64))
    return MessageBatch(ids, x, y, t, _terms(rows, 4))


def load_workload(spec: WorkloadSpec, *, stream: bool = False) -> Inputs:
    """The workload ``spec`` describes, its records validated once (see the module's comment).
    With ``stream``, a generated ``tweets`` workload without drift keeps its messages as a
    :class:`skype.data.streaming.StreamedMessages` step (generated chunk by chunk as it is read,
    the same messages); every other workload is materialised as without it."""
    bounds = spec.bounds
    if not (spec.messages or spec.subscriptions or spec.events):
        if spec.vocabulary:
            raise InputError("E023", what="--vocabulary", expected="used with workload files (a generated dataset "
                                                                   "has its own vocabulary)", value=spec.vocabulary)
        if stream and spec.dataset == "tweets" and spec.drift == "none" and bounds == DEFAULT_BOUNDS:
            ts = TweetsStream(spec.num_messages, spec.seed, bounds)
            subs = ts.subscriptions(spec.num_subs, sub_terms=spec.sub_terms, k=spec.k, sub_keywords=spec.sub_keywords)
            return Inputs(ts.vocabulary, subs, [("msgs", StreamedMessages(ts))], bounds,
                          f"{spec.dataset} (seed {spec.seed})")
        w = make_workload(spec.dataset, num_subs=spec.num_subs, num_messages=spec.num_messages, seed=spec.seed,
                          sub_terms=spec.sub_terms, k=spec.k, sub_keywords=spec.sub_keywords, bounds=bounds)
        desc = f"{spec.dataset} (seed {spec.seed})"
        drift = spec.drift
        if drift != "none":
            d = make_drift(drift, w, start=spec.drift_start, seed=spec.seed)
            return Inputs(w.vocabulary, w.subscriptions, d.steps(), bounds, f"{desc}, drift {drift}", texts=w.texts)
        return Inputs(w.vocabulary, w.subscriptions, [("msgs", w.messages)], bounds, desc, texts=w.texts)
    if spec.messages and spec.events:
        raise InputError("E023", what="--messages", expected="left out when --events is given", value=spec.messages)
    collector = _Collector(spec.on_error)
    if spec.events:
        events = _records(spec.events, io.event_from_obj, collector)
        vocab = _vocabulary_from([rec for _, (op, rec) in events if op == "msg"])
    else:
        messages = _records(spec.messages, io.message_from_obj, collector) if spec.messages else []
        vocab = _vocabulary_from([m for _, m in messages])
    if spec.vocabulary:
        from skype.dskype.vocabulary import FrozenVocabulary  # no pyspark: the file's format and ids

        vocab = FrozenVocabulary.load(spec.vocabulary)
    sub_rows: list[tuple] = []
    others: list = []
    if spec.subscriptions:
        builder = _Builder(vocab, bounds, collector, spec.subscriptions)
        for line, sub in _records(spec.subscriptions, io.subscription_from_obj, collector):
            got = builder.subscription(line, sub)
            if got is not None:
                (sub_rows if got[0] == "topk" else others).append(got[1])
        known = builder.sub_ids
    else:
        known = set()
    steps: list[tuple[str, Any]] = []
    if spec.events:
        builder = _Builder(vocab, bounds, collector, spec.events)
        builder.sub_ids = set(known)
        pending: list[tuple] = []
        for line, (op, rec) in events:
            if op == "msg":
                row = builder.message(line, rec)
                if row is not None:
                    pending.append(row)
                continue
            if pending:
                steps.append(("msgs", messages_batch(pending)))
                pending = []
            if op == "sub":
                got = builder.subscription(line, rec)
                if got is not None:
                    steps.append(("sub", subscriptions_batch([got[1]])) if got[0] == "topk" else ("ksub", got[1]))
            elif op == "query":
                q = builder.query(line, rec)
                if q is not None:
                    steps.append(("query", q))
            else:
                sid = builder.unsubscription(line, rec)
                if sid is not None:
                    steps.append(("unsub", sid))
        if pending:
            steps.append(("msgs", messages_batch(pending)))
        desc = spec.events
    else:
        builder = _Builder(vocab, bounds, collector, spec.messages or "")
        rows = [r for r in (builder.message(line, m) for line, m in messages) if r is not None]
        batch = messages_batch(rows)
        steps.append(("msgs", batch))
        desc = spec.messages or ""
        if not spec.subscriptions:
            # messages only: generate paper-style subscriptions over them
            rng = np.random.default_rng(np.random.SeedSequence(spec.seed).spawn(2)[1])
            subs = make_subscriptions(batch, vocab, spec.num_subs, rng, sub_terms=spec.sub_terms, k=spec.k,
                                      sub_keywords=spec.sub_keywords)
            return Inputs(vocab, subs, steps, bounds, desc, collector.rejected, others=others)
    return Inputs(vocab, subscriptions_batch(sub_rows), steps, bounds, desc, collector.rejected, others=others)
