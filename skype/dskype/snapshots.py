"""Snapshot queries (``{"op": "query"}``) on DSkype: answered by the partitions at their stream position.

No pyspark here.  A query is one more command of the stream (``docs/queries.md``):

* **Staging** (:func:`lower_query`): the driver compiles the query with the run's vocabulary, in
  stream order (so that new terms get the ids ``simulate`` gives them), into a ``spec`` JSON
  (:func:`query_json`) carried by a command ``op = query`` whose ``at`` is the number of messages
  before it and whose ``id`` is the query's ordinal ``n``.  The spec also carries what the
  partitions cannot know: ``now_t`` (the timestamp of the last message before the query: the
  centralized engine's clock) and, for ``last`` on a count window (where partition engines run on
  ``t := seq``), ``from_seq``, the first message with ``now - t < last`` (decided exactly, as
  :func:`skype.reference_queries.fresh`).
* **Routing**: a method whose partitions each receive every message (``whole_window`` in the
  capability table) sends query ``n`` to partition ``n mod P`` only, which holds the whole
  window; the other methods send it to every partition.
* **Partitions** (:func:`due_query`, :func:`query_clock`, :func:`answer`; the partition core
  drives them): a query due in a batch is answered in the batch's command order,
  after the messages before it and before those after it, with the engine's clock at the query's
  clock (``at - 1`` on a count window, ``now_t`` on a time window): the engine's window is then
  exactly the window ``simulate`` answers over, restricted to the partition's share.  The answer
  is one JSON line ``{"n", "p", "answer", "seq"}`` (``seq``: each entry's global sequence number,
  the tie-break of the merge).
* **Merge** (:func:`merge_partials`, on the driver, from the answer files): one partial is the
  answer.  Partials of several partitions (a partitioned window) merge as each kind ranks: ``range``
  the union, newest first; ``knn`` distance ascending then newest first; ``topk`` score descending
  then newest first; duplicates (a message on several partitions) once; cut to ``k``.  The union
  holds the answer when every message that can be in it is on some partition (its terms route
  it: the capability table's ``snapshot_kinds_with_terms``) and each partition's answer is exact
  over its share (a message ranks there at least as high as globally).  ``terms``: each term's
  largest count, count descending then term ascending, cut to ``k``; exact where one partition
  owns each term whole (keyword ranges): the owner's count is exact, the others' no larger, and
  a term of the answer is in its owner's top list (a term ranking before it there ranks before
  it globally too).
* **Answers file** (:func:`write_answers`): the lines of ``simulate --answers-out``, in query order;
  a query whose partials are not all there is an error (E137), never a partial answer.
* **A live stream** (``serve --engine spark``): the service stages each query as it comes
  (:func:`lower_query` at the acknowledged position, :func:`refuse_live` first) and answers it from
  the answer files of the batch that holds it (:func:`batch_partials`, :func:`merge_partials`).
"""

from __future__ import annotations

import json
import math
import os
import secrets
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable

import numpy as np

from skype import io, queries
from skype.errors import InputError, OperationalError
from skype.model import Match
from skype.partitioning.capabilities import capabilities_of
from skype.queries import Neighbor, QuerySpec, TermCount

ANSWER_FIELDS = ("qid", "after", "kind", "answer")


# --------------------------------------------------------------------------- staging


def query_fields(payload: dict) -> dict[str, Any]:
    """The fields of a query record as ``Engine.query`` takes them."""
    return {k: v for k, v in payload.items() if k not in ("qid", "kind")}


def has_terms(payload: dict) -> bool:
    """Whether a query carries terms (a text predicate, or topk's text): ``text``, ``terms`` or a
    ``match`` expression."""
    return (payload.get("text") is not None or payload.get("terms") is not None
            or payload.get("match", "any") not in queries.MATCH_WORDS)


def lower_query(payload: dict, n: int, vocabulary, bounds, at: int, times: list[np.ndarray]) -> tuple[str, dict]:
    """The spec JSON of query ``n`` at position ``at`` (see module docstring), and what the answers
    file needs of it (``qid, after, kind, k``); ``times``: the timestamps of the messages before
    it, in stream order, as non-empty chunks."""
    spec = queries.compile_query(payload["kind"], query_fields(payload), vocabulary, bounds, -math.inf, snapshot=True)
    now_t = float(times[-1][-1]) if at > 0 else None
    from_seq = None
    if spec.last is not None and now_t is not None:  # used on count windows
        from_seq = _first_fresh(times, at, now_t, spec.last)
    asked = {"qid": payload.get("qid"), "after": at, "kind": spec.kind, "k": spec.k}
    return query_json(spec, n, payload.get("qid"), now_t, from_seq), asked


def asked_queries(inputs) -> list[dict]:
    """What the answers file needs of each query, by ordinal: ``qid, after, kind, k`` (as
    :func:`lower_query` returns it, without compiling)."""
    out, position = [], 0
    for op, payload in inputs.steps:
        if op == "msgs":
            position += len(payload)
        elif op == "query":
            out.append({"qid": payload.get("qid"), "after": position, "kind": payload.get("kind"),
                        "k": int(payload.get("k", 10))})
    return out


def _first_fresh(times: list[np.ndarray], at: int, now: float, last: float) -> int:
    """The first sequence number whose message has ``now - t < last`` (exactly): the stream's
    timestamps do not decrease, so the fresh messages are a suffix.  Searched chunk by chunk
    from the newest: a query's work is the chunks its fresh suffix spans, not the stream so far."""
    fresh = lambda t: Fraction(now) - Fraction(float(t)) < Fraction(last)  # noqa: E731
    end = at
    for chunk in reversed(times):
        start = end - len(chunk)
        if not fresh(chunk[0]):  # the border is in this chunk
            pos = int(np.searchsorted(chunk, now - last, side="right"))  # near it; settled exactly below
            pos = min(max(pos, 1), len(chunk))
            while pos > 1 and fresh(chunk[pos - 1]):
                pos -= 1
            while pos < len(chunk) and not fresh(chunk[pos]):
                pos += 1
            return start + pos
        end = start
    return 0


def query_json(spec: QuerySpec, n: int, qid: Any, now_t: float | None, from_seq: int | None) -> str:
    """A compiled query as the ``spec`` of its command (floats round-trip exactly)."""
    return json.dumps({"query": n, "qid": qid, "kind": spec.kind, "rect": list(spec.rect), "x": spec.x, "y": spec.y,
                       "k": spec.k, "alpha": spec.alpha, "program": [int(t) for t in spec.program],
                       "cover": [int(t) for t in spec.cover], "term_ids": [int(t) for t in spec.term_ids],
                       "weights": [float(w) for w in spec.weights], "last": spec.last, "now_t": now_t,
                       "from_seq": from_seq}, allow_nan=False)


def is_query(spec: object) -> bool:
    """Whether a command's spec is a compiled query (:func:`query_json`)."""
    return isinstance(spec, str) and spec.startswith('{"query"')


def query_error(spec: object) -> str | None:
    """Why a command's spec is not a compiled query (:func:`query_json`) an executor can answer,
    or None: checked where records are screened, before it reaches a partition."""
    if not is_query(spec):
        return "it lacks the compiled spec the driver writes when it stages the stream"
    try:
        spec_of(json.loads(str(spec)))
    except (ValueError, KeyError, TypeError, IndexError) as err:
        return f"its compiled spec does not parse ({type(err).__name__}: {str(err)[:80]})"
    return None


def spec_of(d: dict) -> QuerySpec:
    return QuerySpec(d["kind"], rect=tuple(d["rect"]), x=d["x"], y=d["y"], k=d["k"], alpha=d["alpha"],
                     program=np.array(d["program"], np.int64), cover=np.array(d["cover"], np.int64),
                     term_ids=np.array(d["term_ids"], np.int64), weights=np.array(d["weights"], np.float64),
                     last=d["last"])


# --------------------------------------------------------------------------- refusals


def refuse(inputs, methods: Iterable[str]) -> None:
    """E135 for the first query a method cannot answer exactly (its capability row)."""
    for method in methods:
        caps = capabilities_of(method)
        for op, payload in inputs.steps:
            if op != "query":
                continue
            kind = payload.get("kind")
            if kind in caps.snapshot_kinds:
                continue
            if kind in caps.snapshot_kinds_with_terms:
                if has_terms(payload):
                    continue
                reason = (f"without terms a {kind} answer need hold no query term, and the method routes "
                          f"messages by their terms (it answers {caps.snapshots_served()})")
            else:
                reason = (f"a {kind} answer counts every message of its rectangle whatever its terms, and the "
                          f"method spreads a term's messages over several partitions (it answers "
                          f"{caps.snapshots_served()})")
            raise InputError("E135", method=method, qid=payload.get("qid"), kind=kind, reason=reason)


def refuse_summaries(inputs, summarised: Iterable[str]) -> None:
    """E135 for the first query of a run whose ``summarised`` methods route messages by keyword
    summaries (``prefix`` on a count window: :func:`skype.dskype.plan.summary_dir_of`)."""
    for method in summarised:
        for op, payload in inputs.steps:
            if op == "query":
                raise InputError("E135", method=method, qid=payload.get("qid"), kind=payload.get("kind"),
                                 reason="its keyword summaries send a message only to the partitions where one of "
                                        "its terms is live, so no partition need hold the messages of the query's "
                                        "terms (--summaries off routes every term)")


def refuse_live(payload: dict, method: str, summarised: bool, where: str) -> None:
    """A live stream's checks of one query before it is staged (``serve --engine spark``): E135
    for what ``method`` cannot answer exactly (:func:`refuse`, and :func:`refuse_summaries` when it
    routes by keyword summaries), E138 for ``terms``: its ties order by term name, which the
    partitions read once, from a vocabulary the live stream still grows."""
    one = SimpleNamespace(steps=[("query", payload)])
    refuse(one, [method])
    if summarised:
        refuse_summaries(one, [method])
    if payload.get("kind") == "terms":
        raise InputError("E138", where=where, reason="a terms answer orders its ties by term name, and the "
                                                     "partitions hold no names of the terms the live stream adds")


# --------------------------------------------------------------------------- partitions


def query_clock(d: dict, at: int, window_kind: str) -> float | None:
    """The engine clock a query is answered at (None: no message before it)."""
    if at <= 0 or d["now_t"] is None:
        return None
    return float(at - 1) if window_kind == "count" else float(d["now_t"])


def answer(engine, d: dict, at: int, window_kind: str, partition: int, seq_of) -> str:
    """One partition's answer line of a query (its engine's clock is at :func:`query_clock`)."""
    spec = spec_of(d)
    now = query_clock(d, at, window_kind)
    result: list = []
    if now is not None:
        if spec.last is not None and window_kind == "count":
            # the engines' times are sequence numbers: keep seq >= from_seq (half-integers are exact)
            spec.last = at - int(d["from_seq"]) - 0.5
        if spec.last is None or spec.last > 0:
            result = engine.query_spec(spec, now)
    ids = ([int(i) for i in result] if spec.kind == "range" else
           [int(e.id) for e in result] if spec.kind != "terms" else [])
    seq = seq_of(np.array(ids, np.int64)).tolist() if ids else []
    return json.dumps({"n": d["query"], "p": partition, "answer": io.answer_entries(spec.kind, result), "seq": seq})


def due_query(queries, qi: int, hwm_seq: int, partition: int) -> tuple[int, dict]:
    """Query row ``qi`` of a partition's due queries: its position ``at`` and its spec; E138 when
    it arrived after the batch that holds its position (its window is gone)."""
    at = int(queries.at[qi])
    d = json.loads(queries.spec[qi])
    if at <= hwm_seq:  # an open stream's producer wrote it late
        raise InputError("E138", where=f"partition {partition}",
                         reason=f"query {d.get('qid')!r} at position {at} arrived after the batch that holds "
                                f"its position")
    return at, d


# --------------------------------------------------------------------------- merge


def merge_partials(kind: str, k: int, partials: list[dict]) -> list:
    """The answer of one query from its partitions' answer lines (see module docstring).

    >>> merge_partials("terms", 2, [{"answer": [{"term": "tea", "count": 3}, {"term": "cup", "count": 1}]},
    ...                             {"answer": [{"term": "cup", "count": 3}, {"term": "tea", "count": 1}]}])
    [{'term': 'cup', 'count': 3}, {'term': 'tea', 'count': 3}]
    """
    if len(partials) == 1:
        return partials[0]["answer"]
    if kind == "terms":  # each term's largest count: its owner's, exact (docs/queries.md)
        counts: dict[str, int] = {}
        for part in partials:
            for e in part["answer"]:
                counts[e["term"]] = max(counts.get(e["term"], 0), int(e["count"]))
        by_count = sorted(counts.items(), key=lambda tc: (-tc[1], tc[0]))
        return [{"term": t, "count": c} for t, c in by_count[:k]]
    entries: dict[int, tuple] = {}
    for part in partials:
        for entry, s in zip(part["answer"], part["seq"]):
            mid = int(entry) if kind == "range" else int(entry["id"])
            entries.setdefault(mid, (entry, s))
    if kind == "range":
        return [e for e, _ in sorted(entries.values(), key=lambda v: -v[1])]
    if kind == "knn":
        ranked = sorted(entries.values(), key=lambda v: (v[0]["distance"], -v[1]))
    else:
        ranked = sorted(entries.values(), key=lambda v: (-v[0]["score"], -v[1]))
    return [e for e, _ in ranked[:k]]


def answered(kind: str, answer_entries: list) -> list:
    """JSON answer entries back as :meth:`Engine.query` objects (for tests and callers)."""
    if kind == "range":
        return [int(i) for i in answer_entries]
    if kind == "knn":
        return [Neighbor(int(e["id"]), float(e["distance"])) for e in answer_entries]
    if kind == "terms":
        return [TermCount(e["term"], int(e["count"])) for e in answer_entries]
    return [Match(int(e["id"]), float(e["score"])) for e in answer_entries]


# --------------------------------------------------------------------------- answers files


def write_part(directory: str | Path, batch_id: int, part: str, lines: list[str]) -> None:
    """A task's answer lines as ``batch-<id>-part-<p>.jsonl``: written under a name unique to the
    attempt, then renamed (atomic); a replayed batch replaces the file with the same lines."""
    path = Path(directory) / f"batch-{batch_id:08d}-part-{part}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(6)}.tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(tmp, path)


def read_partials(directory: str | Path, upto: int | None = None) -> dict[int, dict[int, dict]]:
    """Query ordinal -> partition -> its answer line, from every answer file of a batch up to
    ``upto`` (None: all; the files of a batch stopped mid-way are partial, and its re-run rewrites
    them) (a line read twice, from a replayed batch, counts once)."""
    out: dict[int, dict[int, dict]] = {}
    d = Path(directory)
    if not d.is_dir():
        return out
    for path in sorted(d.glob("batch-*.jsonl")):
        if upto is not None and int(path.name.split("-")[1]) > upto:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                out.setdefault(int(row["n"]), {})[int(row["p"])] = row
    return out


def batch_partials(directory: str | Path, batch_id: int) -> dict[int, dict[int, dict]]:
    """Query ordinal -> partition -> its answer line, from the answer files of one completed batch
    (a live stream's waiting queries: each is answered whole in the batch that holds it)."""
    out: dict[int, dict[int, dict]] = {}
    for path in sorted(Path(directory).glob(f"batch-{batch_id:08d}-part-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                out.setdefault(int(row["n"]), {})[int(row["p"])] = row
    return out


def write_answers(path: str | Path, directory: str | Path, asked: list[dict], partitions: int, whole_window: bool,
                  complete: bool = True, upto: int | None = None) -> int:
    """The answers file (``simulate --answers-out``'s lines, in query order) from the answer files
    in ``directory`` of the batches up to ``upto`` (the last completed one); ``asked``: per query
    ordinal ``{"qid", "after", "kind", "k"}``.  Every query must have all its partials (1, or
    ``partitions``) unless ``complete`` is false (a run stopped early: the queries it reached).
    Returns the number of answers written."""
    partials = read_partials(directory, upto)
    need = 1 if whole_window else partitions
    missing = [q["qid"] for n, q in enumerate(asked) if len(partials.get(n, {})) != need
               and (complete or n in partials)]
    if missing:
        raise OperationalError("E137", missing=missing[:5] + (["..."] if len(missing) > 5 else []), path=str(directory))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(path, "w", encoding="utf-8") as fh:
        for n, q in enumerate(asked):
            if n not in partials:
                continue
            parts = [partials[n][p] for p in sorted(partials[n])]
            fh.write(json.dumps({"qid": q["qid"], "after": q["after"], "kind": q["kind"],
                                 "answer": merge_partials(q["kind"], q["k"], parts)}) + "\n")
            written += 1
    return written
