"""Every error the package raises, from one catalogue.

Two kinds of coded errors (:class:`CodedError`), split by what the caller should do:

- :class:`InputError` (a ``ValueError``): a record, an argument or a setting was rejected; it
  names the offending record (file, line, record id) so that a user can find and fix it.
  Sending the same input again fails again.
- :class:`OperationalError` (a ``RuntimeError``): the input was fine, the system could not serve
  it now or a run failed: a full queue, a recovering or failed server, too many connections, a
  run directory that is incomplete or unreadable, a run that failed or ran low on memory.  Retry
  later, or fix the environment.  :data:`OPERATIONAL` lists its codes; every other code is an
  input error.

Codes are stable: tests and callers may match on ``err.code``.  A merged code stays in the
catalogue as an alias of the one that replaced it (:data:`ALIASES`).  Internal faults (bugs)
raise plain built-in errors, outside the catalogue.
"""

from __future__ import annotations

from typing import Iterable, Self


class SkypeError(Exception):
    """Base class of every error raised by skype."""


# the codes raised as OperationalError (the module docstring); every other code is an InputError
OPERATIONAL = frozenset({
    "E064", "E065", "E067", "E087",   # a rebalancing run directory incomplete or unreadable, events not shared
    "E093", "E094", "E098",           # the live service: queue full, recovering or failed, too many connections
    "E116", "E123", "E131", "E137",   # a hand-over unreadable, the memory floor, a failed batch, answers missing
    "E139",                           # serve --engine spark: a snapshot query's batch not completed in time
})
# merged codes: old -> the code that now carries the message (the old ones were published in
# docs/service.md and tests; a code read from an older log still resolves in the catalogue)
ALIASES = {"E060": "E023", "E114": "E023"}


class Errors:
    """Coded message catalogue (format strings)."""

    E001 = "coordinate {field}={value!r} is not a finite number"
    E002 = "location ({x}, {y}) lies outside the space bounds {bounds}"
    E003 = "k must be an integer >= 1, got {value!r}"
    E004 = "alpha must be a number in [0, 1], got {value!r}"
    E005 = "text {text!r} has no indexable term (empty or only stopwords)"
    E006 = "term {term!r} has weight {weight!r}; weights must be finite and > 0"
    E007 = "duplicate subscription id {id}"
    E008 = "unsubscribe of unknown subscription id {id}"
    E009 = "timestamp {t!r} is smaller than the previous message's {prev!r}; timestamps must not decrease"
    E010 = "malformed JSON: {detail}"
    E011 = "missing field {field!r}"
    E012 = "field {field!r} has the wrong type: expected {expected}, got {value!r}"
    E013 = "a record needs exactly one of 'text' and 'terms', got {got}"
    E014 = "bounds {value!r} are invalid: need minx < maxx and miny < maxy, all finite"
    E015 = "give exactly one of window (messages) and window_seconds, got window={window!r}, window_seconds={seconds!r}"
    E016 = "window must be an integer >= 1, got {value!r}"
    E017 = "window_seconds must be a finite number > 0, got {value!r}"
    E018 = "unknown op {op!r}: expected 'sub', 'unsub', 'msg' or 'query'"
    E019 = "duplicate message id {id}: a message with this id is still in the window"
    E020 = "unknown subscription id {id}"
    E021 = "timestamp {t!r} is not a finite number"
    E022 = "unknown {what} {value!r}; choose one of {choices}"
    E023 = "{what} must be {expected}, got {value!r}"
    E024 = "unsupported file format for {path!r}: expected .jsonl, .json or .parquet"
    E025 = "id must be an integer in the signed 64-bit range, got {value!r}"
    E026 = "batch arrays disagree: {detail}"
    E027 = "term vector is malformed: {detail}"
    E028 = "run directory {path!r} was created with other settings (first run, now): {detail}"
    # E029-E039: limits and unreadable input (issue 14)
    E029 = "k={value!r} is above the limit of {limit} (a top-k that deep is a full scan, not a subscription)"
    E030 = "a record has {n} distinct terms; at most {limit} are allowed"
    E031 = "line is not valid UTF-8: {detail}"
    E032 = "Parquet file cannot be read: {detail}"
    E033 = "a {kind} record must be a JSON object, got {value!r}"
    # E040-E059: query kinds beside topk, lifetimes and snapshot queries (issue 12)
    E040 = "unknown query kind {kind!r}; choose one of {choices}"
    E041 = "malformed boolean expression {expr!r}: {detail}"
    E042 = "rect {value!r} is invalid: need [minx, miny, maxx, maxy], finite, with minx <= maxx and miny <= maxy"
    E043 = "until={until!r} is in the past: the engine's clock is at {clock!r}"
    E044 = "match must be 'any', 'all' or a boolean expression over terms with AND, OR and parentheses, got {value!r}"
    E045 = "the record's terms {terms} differ from the terms of its expression {operands}"
    E046 = "field {field!r} does not apply to a {kind!r} record"
    E047 = "last must be a finite number of seconds > 0, got {value!r}"
    E048 = "{where} cannot serve kind {kind!r} exactly; it serves {supported}"
    E049 = "until must be a finite number, got {value!r}"
    E050 = "snapshot queries and the kinds {kinds} need the engine's query window (snapshots=True)"
    E051 = "the spec of subscription {id} in a command stream is invalid: {detail}"
    # E055-E058: the block index's scan kernels (issue 23)
    E055 = "scan kernel {kernel!r} is not available on this CPU; available: {available}"
    E056 = "the column scan is not available: {detail}"
    # E060-E079: adaptive partitioning, rebalancing and drift (issue 13)
    E060 = E023  # alias: merged into E023 (ALIASES)
    E061 = "rebalancing move rejected: {detail}"
    E062 = "drift workload {kind!r} cannot be made: {detail}"
    E063 = "live rebalancing on Spark: {detail}"
    E064 = "the routing tables of a live rebalancing run are missing or unreadable in {path!r}: {detail}"
    E065 = "the rebalancing state of batch {batch} is missing in {path!r}: the run directory is incomplete"
    E066 = "a unit of method {method!r} cannot be cut at runtime: {detail}"
    E067 = ("the rebalancing statistics of batch {batch} (pipeline {pipeline}) lack the reports of partitions "
            "{missing}: each partition of an adaptive pipeline reports in every batch")
    # E080-E089: ingestion and stream order on Spark (issue 11)
    E080 = ("unseen terms {first!r} and {second!r} share the hashed term id {term_id} (vocabulary key {key}, "
            "{slots} slots): rebuild the vocabulary from a sample that holds one of them, or with more slots")
    E081 = "vocabulary file {path!r} cannot be used: {detail}"
    E082 = ("the messages topic must have exactly one partition (one total order of messages); got a record of "
            "partition {partition} at offset {offset}")
    E083 = ("message offsets are not dense ({detail}): a count window needs every offset of the messages topic to "
            "be a message (no transactional markers, no compaction); use a time window or a plain topic")
    E084 = ("command at offset {offset} of topic partition {partition} does not fit the command key "
            "(partition < 2^23, offset < 2^40)")
    E085 = "executor ingestion: {detail}"
    E086 = "unknown command op {op!r}: expected 'sub', 'unsub' or 'results'"
    E087 = ("the run directory {run_dir} holds none of the {events} result events the executors reported: "
            "it must be on a file system every node sees")
    E088 = ("--results-out with --sink kafka: the stateful stages sent no final results for {method!r} (an open "
            "stream needs a results request, {{\"op\": \"results\"}}, or a run that reaches its end); the "
            "events went to topic {topic!r}, the driver has none to fold")
    # E090-E109: the live service, python -m skype.run serve (issue 24)
    E090 = "unknown route {method} {path}"
    E091 = "request body of {size} bytes is above the limit of {limit} bytes (--max-body-bytes)"
    E092 = "{n} records in one request; at most {limit} are allowed (--max-records)"
    E093 = "the engine queue is full ({size} requests waiting): retry later"
    E094 = "the server is {status}: retry later"
    E095 = "this route needs a token (Authorization: Bearer TOKEN, or ?token=): {detail}"
    E096 = "the token may not {action}"
    E097 = ("refusing to listen on {host!r} without --token-file: without tokens the server listens on "
            "loopback only (127.0.0.1, ::1, localhost)")
    E098 = "too many open requests and streams ({limit}, --max-connections): retry later"
    E099 = "a connection may follow at most {limit} subscriptions (--max-streams-per-connection), asked for {n}"
    E100 = "the record's id {body!r} differs from the path's {path!r}"
    E101 = "token file {path!r} cannot be used: {detail}"
    E102 = "data directory {path!r} cannot be used: {detail}"
    E103 = "the event stream fell behind (slow consumer): resume after seq {seq}"
    E104 = "WebSocket message is invalid: {detail}"
    E105 = "the request body is empty: expected {expected}"
    E106 = "last={value!r} is invalid: expected a number of messages, an integer >= 0"
    # E145-E148: the live service's request checks (issue 34; a bad page or id list: E023)
    E145 = ("Host {host!r} is not a name of this server ({allowed}): without --token-file the server answers "
            "only its listening address, localhost and the loopback IP (a guard against DNS rebinding)")
    E146 = ("a page from the origin {origin!r} may not {action}: only the server's own origin ({own}) and the "
            "origins given with --allow-origin may")
    E147 = "{method} {path} needs Content-Type application/json or application/x-ndjson, got {got!r}"
    E148 = ("a token in the query string (?token=) is accepted on the event-stream routes only; send it as "
            "Authorization: Bearer TOKEN")
    # E110-E113: the Python client of the server (skype.client, issue 24; its bad arguments: E023)
    E110 = "the server at {url} refused the request without a catalogue error: {detail}"
    E111 = "the server at {url} cannot be reached: {detail}"
    E112 = "the server at {url} kept refusing for {seconds} s (backpressure or recovery): {detail}"
    E113 = "the server at {url} sent something that is not an event object: {detail}"
    E114 = E023  # alias: merged into E023 (ALIASES)
    # E115-E122: adaptive methods on Spark, versions through the stream (issue 25; skype.dskype.handover)
    E115 = ("partition {partition} of an adaptive pipeline received a batch without its table version: "
            "the stream must come from the staged source, which records the version in its offsets")
    E116 = ("the hand-over of table version {version} from partition {sender} cannot be read in {path!r}: "
            "{detail}")
    E117 = ("partition {partition} of an adaptive pipeline received a command for subscription {sub} that "
            "table version {version} places on partition {owner}")
    # E123-E129: DSkype on Spark at scale (skype.spark.runtime, issue 25: 1M subscriptions on defaults)
    E123 = ("the machine's available memory fell to {available} MB (floor {floor} MB) in batch {batch}, with "
            "{hosted} subscription replicas in the engines ({hosts} MB in the engine hosts): {advice}")
    # E130-E134: memory of a DSkype run on Spark (skype.spark.runtime, issue 25)
    E130 = "{setting}={value} holds about {commands} subscription commands per micro-batch, too few: {advice}"
    E131 = "the run failed in batch {batch}, {where}: {advice}"
    # E135-E139: snapshot queries on Spark (issue 25; skype.dskype.snapshots, docs/queries.md)
    E135 = "distributed (method {method}) cannot answer snapshot query {qid!r} ({kind}) exactly: {reason}"
    E136 = "{what} needs a stream the driver stages and the file sink: {detail}"
    E137 = "the answers of snapshot queries {missing} are missing from {path!r}: the run directory is incomplete"
    E138 = "{where} cannot answer snapshot queries: {reason}"
    E139 = ("snapshot query {qid!r}, staged at position {at}, was not answered within {seconds} s: the Spark "
            "batch that holds it has not completed (see /metrics skype_spark_batch); retry later")
    # E140-E144: the live service's write-ahead log (issue 34; skype.service.wal, python -m skype.run wal)
    E140 = ("the log is damaged before its tail: {segment}, byte {offset} (record {record}): {detail}. Nothing was "
            "changed; `python -m skype.run wal check {directory}` shows what a repair would drop, "
            "`wal repair` drops it")
    E141 = "wal {action} {path!r}: {detail}"
    # E160: an engine state (Engine.import_state) that does not fit the engine (issue 34)
    E160 = "engine state: {detail}; nothing was registered"


class CodedError(SkypeError):
    """An error of the catalogue.

    ``code`` is the catalogue key (``"E003"``...; an alias resolves to its code), ``source`` the
    file (if any), ``line`` the 1-based line or row number in it, ``record_id`` the id of the
    record when it has one.
    """

    def __init__(
        self,
        code: str,
        *,
        source: str | None = None,
        line: int | None = None,
        record_id: object = None,
        **fields: object,
    ) -> None:
        self.code = ALIASES.get(code, code)
        self.source = source
        self.line = line
        self.record_id = record_id
        self.detail = getattr(Errors, code).format(**fields)
        super().__init__(self._render())

    def located(
        self, *, source: str | None = None, line: int | None = None, record_id: object = None
    ) -> Self:
        """Return the same error with the record's location filled in (where still unknown)."""
        if source is not None and self.source is None:
            self.source = source
        if line is not None and self.line is None:
            self.line = line
        if record_id is not None and self.record_id is None:
            self.record_id = record_id
        self.args = (self._render(),)
        return self

    def _render(self) -> str:
        where = []
        if self.source is not None:
            where.append(str(self.source))
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.record_id is not None:
            where.append(f"record id {self.record_id}")
        prefix = ", ".join(where)
        return f"{prefix}: {self.detail} [{self.code}]" if prefix else f"{self.detail} [{self.code}]"


class InputError(CodedError, ValueError):
    """A record, an argument or a setting was rejected (the module docstring)."""


class OperationalError(CodedError, RuntimeError):
    """The input was fine; the system could not serve it now, or a run failed (the module
    docstring; its codes: :data:`OPERATIONAL`)."""


def invalid_choice(what: str, value: object, choices: Iterable[object]) -> InputError:
    return InputError("E022", what=what, value=value, choices=", ".join(map(str, choices)))
