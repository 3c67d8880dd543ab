"""File formats (the public contract; see README "File formats").

* messages: ``{"id": int, "x": float, "y": float, "t": float, "text": str}`` or ``"terms":
  {"term": weight}`` in place of ``text``; ``t`` optional (default: arrival index), non-decreasing.
* subscriptions: ``{"id": int, "x": float, "y": float, "k": int, "alpha": float, "text" | "terms"}``,
  or with ``"kind"`` one of the other kinds (``docs/queries.md``); any kind may carry ``until``.
* events: a subscription with ``"op": "sub"``, ``{"op": "unsub", "id": int}``, a message with
  ``"op": "msg"``, or a snapshot query ``{"op": "query", "qid", "kind", ...}``, in stream order.
* results: one line per subscription, ``{"id": sub_id, "topk": [{"id": msg_id, "score": float}]}``
  in ranking order, also for an empty top-k; ``range``: ``{"id", "matches": [msg ids]}``,
  ``knn``: ``{"id", "topk": [{"id", "distance"}]}``, ``terms``: ``{"id", "terms": [{"term", "count"}]}``.
* answers: ``{"qid", "after": messages so far, "kind", "answer": [...]}`` (elements shaped as in
  results; ``topk``: ``{"id", "score"}``).

JSON Lines (``.jsonl``; blank lines are skipped) or Parquet (``.parquet``) with the same columns
(``terms`` as a map<string, double>, ``topk`` as a list of structs).  Readers yield ``(line,
record)`` and raise :class:`~skype.errors.InputError` naming the file and line: malformed JSON
(E010), a line that is not UTF-8 (E031), a Parquet file that cannot be read (E032: the rows
before the damage are still yielded).  In Parquet, an empty ``terms`` map is an empty object.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from skype.errors import InputError
from skype.model import Match, Message, MessageBatch, Subscription, SubscriptionBatch
from skype.queries import check_kind, subscription_from_fields
from skype.text import Vocabulary
from skype.validate import record_fields

PARQUET_BATCH = 65_536


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix == ".parquet":
        return "parquet"
    raise InputError("E024", path=str(path))


def _clean(name: str, value: Any) -> Any:
    """Parquet map columns (lists of pairs, ``terms``) as JSON would give them."""
    if name == "terms" and isinstance(value, list):
        return dict(value) if all(isinstance(p, tuple) and len(p) == 2 for p in value) else value
    return value


def iter_objects(path: str | Path, on_malformed: Callable[[InputError], None] | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, object)`` for every record of a JSONL or Parquet file.

    A malformed line raises, or is handed to ``on_malformed`` (which may raise) and skipped; an
    unreadable Parquet file raises or is handed to ``on_malformed`` and ends the file.
    """
    path = Path(path)
    fmt = _format(path)

    def malformed(bad: InputError) -> None:
        if on_malformed is None:
            raise bad
        on_malformed(bad)

    if fmt == "jsonl":
        with open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    malformed(InputError("E031", detail=f"byte {err.start + 1}: {err.reason}", source=str(path),
                                         line=lineno))
                    continue
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    malformed(InputError("E010", detail=err.msg + f" at column {err.colno}", source=str(path),
                                         line=lineno))
                    continue
                yield lineno, obj
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        row = 0
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH):
                for rec in batch.to_pylist():
                    row += 1
                    yield row, {k: _clean(k, v) for k, v in rec.items() if v is not None}
        except (pa.ArrowException, OSError) as err:
            malformed(InputError("E032", detail=str(err).splitlines()[0] if str(err) else type(err).__name__,
                                 source=str(path), line=row + 1))


def _text_or_terms(obj: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "text" in obj:
        out["text"] = obj["text"]
    if "terms" in obj:
        terms = obj["terms"]
        if not isinstance(terms, Mapping):
            raise InputError("E012", field="terms", expected="an object {term: weight}", value=terms)
        out["terms"] = dict(terms)
    return out


def message_from_obj(obj: Any) -> Message:
    record_fields(obj, ("id", "x", "y"), "message")
    return Message(id=obj["id"], x=obj["x"], y=obj["y"], t=obj.get("t"), **_text_or_terms(obj))


def subscription_from_obj(obj: Any) -> Any:
    """A subscription of the record's ``kind`` (default ``"topk"``)."""
    record_fields(obj, ("id",), "subscription")
    kind = obj.get("kind", "topk")
    if kind == "topk":
        record_fields(obj, ("id", "x", "y", "k", "alpha"), "subscription")
        return Subscription(id=obj["id"], x=obj["x"], y=obj["y"], k=obj["k"], alpha=obj["alpha"],
                            until=obj.get("until"), **_text_or_terms(obj))
    return subscription_from_fields(kind, obj)


def query_from_obj(obj: Any) -> dict[str, Any]:
    """A snapshot query record: ``{"qid", "kind", ...fields}`` (fields checked when answered)."""
    record_fields(obj, ("qid", "kind"), "query")
    check_kind(obj["kind"])
    return {k: v for k, v in obj.items() if k != "op"}


def _read(path: str | Path, convert) -> Iterator[tuple[int, Any]]:
    for line, obj in iter_objects(path):
        try:
            yield line, convert(obj)
        except InputError as err:
            rid = obj.get("id") if isinstance(obj, Mapping) else None
            raise err.located(source=str(path), line=line, record_id=rid) from None


def read_messages(path: str | Path) -> Iterator[tuple[int, Message]]:
    return _read(path, message_from_obj)


def read_subscriptions(path: str | Path) -> Iterator[tuple[int, Subscription]]:
    return _read(path, subscription_from_obj)


def event_from_obj(obj: Any) -> tuple[str, Any]:
    record_fields(obj, ("op",), "event")
    op = obj["op"]
    if op == "sub":
        return op, subscription_from_obj(obj)
    if op == "msg":
        return op, message_from_obj(obj)
    if op == "unsub":
        record_fields(obj, ("id",), "event")
        return op, obj["id"]
    if op == "query":
        return op, query_from_obj(obj)
    raise InputError("E018", op=op)


def read_events(path: str | Path) -> Iterator[tuple[int, tuple[str, Any]]]:
    return _read(path, event_from_obj)


# --------------------------------------------------------------------------- writers


def _terms_dict(vocab: Vocabulary, ids, weights) -> dict[str, float]:
    return {vocab.term(int(t)): float(w) for t, w in zip(ids, weights)}


def message_objects(batch: MessageBatch, vocab: Vocabulary, texts: list[str] | None = None) -> Iterator[dict]:
    """Messages as JSON objects (``text`` when given, else the exact ``terms``)."""
    for i in range(len(batch)):
        obj: dict[str, Any] = {"id": int(batch.ids[i]), "x": float(batch.x[i]), "y": float(batch.y[i]), "t": float(batch.t[i])}
        if texts is not None:
            obj["text"] = texts[i]
        else:
            obj["terms"] = _terms_dict(vocab, *batch.terms.row(i))
        yield obj


def subscription_objects(batch: SubscriptionBatch, vocab: Vocabulary) -> Iterator[dict]:
    for i in range(len(batch)):
        yield {
            "id": int(batch.ids[i]), "x": float(batch.x[i]), "y": float(batch.y[i]),
            "k": int(batch.k[i]), "alpha": float(batch.alpha[i]), "terms": _terms_dict(vocab, *batch.terms.row(i)),
        }


def result_objects(results: Iterable[tuple[int, list[Match]]]) -> Iterator[dict]:
    for sid, matches in results:
        yield {"id": int(sid), "topk": [{"id": int(m.id), "score": float(m.score)} for m in matches]}


def answer_entries(kind: str, answer: list) -> list:
    """A result or snapshot answer as JSON values (the results file's element shapes)."""
    if kind == "range":
        return [int(i) for i in answer]
    if kind == "knn":
        return [{"id": int(n.id), "distance": float(n.distance)} for n in answer]
    if kind == "terms":
        return [{"term": e.term, "count": int(e.count)} for e in answer]
    return [{"id": int(m.id), "score": float(m.score)} for m in answer]


RESULT_FIELD = {"topk": "topk", "range": "matches", "knn": "topk", "terms": "terms"}


def kind_result_objects(results: Iterable[tuple[int, str, list]]) -> Iterator[dict]:
    """Results of every kind (``Engine.results_by_kind``) with the per-kind fields."""
    for sid, kind, answer in results:
        yield {"id": int(sid), RESULT_FIELD[kind]: answer_entries(kind, answer)}


def write_objects(path: str | Path, objects: Iterable[Mapping[str, Any]]) -> int:
    """Write JSON objects as JSONL or Parquet (by suffix); returns the number written."""
    path = Path(path)
    fmt = _format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    if fmt == "jsonl":
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for obj in objects:
                fh.write(json.dumps(obj, ensure_ascii=False, allow_nan=False))
                fh.write("\n")
                n += 1
        tmp.replace(path)
        return n
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [_for_parquet(obj) for obj in objects]
    pq.write_table(pa.Table.from_pylist(rows, schema=_parquet_schema(rows)), path)
    return len(rows)


_PARQUET_TYPES = {
    "id": "int64", "x": "float64", "y": "float64", "t": "float64", "k": "int64", "alpha": "float64",
    "text": "string", "op": "string", "kind": "string", "match": "string", "until": "float64", "last": "float64",
    "qid": "int64",
}


def _parquet_schema(rows: list[dict]):
    import pyarrow as pa

    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    fields = []
    for name in names:
        if name == "terms":
            fields.append(pa.field(name, pa.map_(pa.string(), pa.float64())))
        elif name == "topk":
            fields.append(pa.field(name, pa.list_(pa.struct([("id", pa.int64()), ("score", pa.float64())]))))
        elif name == "rect":
            fields.append(pa.field(name, pa.list_(pa.float64())))
        elif name == "matches":
            fields.append(pa.field(name, pa.list_(pa.int64())))
        else:
            fields.append(pa.field(name, pa.type_for_alias(_PARQUET_TYPES.get(name, "string"))))
    return pa.schema(fields)


def _for_parquet(obj: Mapping[str, Any]) -> dict:
    out = dict(obj)
    if "terms" in out:
        out["terms"] = list(out["terms"].items())
    return out


def read_results(path: str | Path) -> dict[int, list[Match]]:
    """Results file -> {subscription id: [Match, ...]}."""
    out: dict[int, list[Match]] = {}
    for _, obj in iter_objects(path):
        out[int(obj["id"])] = [Match(int(e["id"]), float(e["score"])) for e in obj["topk"]]
    return out
