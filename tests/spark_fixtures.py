"""Shared Spark test helpers: the one SparkSession of a test run, small workloads with subscribes
and unsubscribes mid-stream, a centralized reference per micro-batch, and an events fold."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from oracle import Oracle, check_ranking
from skype import io
from skype.data import make_workload

METHODS = ("hashing", "location", "keyword", "prefix", "spatial-first", "keyword-first")


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for every Spark test (UI off, RocksDB state store, 1g driver)."""
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from skype.spark.runtime import make_session

    session = make_session("local[2]", app_name="skype-tests", driver_memory="1g",
                           extra={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()


def events_workload(path: Path, *, num_subs: int = 160, num_messages: int = 1600, seed: int = 4, k: int = 5,
                    dataset: str = "tweets") -> Path:
    """An events file (public format): subscriptions, messages, unsubscribes and subscribes
    mid-stream, a re-subscribe of an id with other terms, a live subscription replaced at one
    position (another alpha and k: the two top-k lists share messages whose scores differ),
    and commands after the last message."""
    w = make_workload(dataset, num_subs=num_subs, num_messages=num_messages, seed=seed, k=k)
    subs = list(io.subscription_objects(w.subscriptions, w.vocabulary))
    msgs = list(io.message_objects(w.messages, w.vocabulary))
    first = num_subs * 3 // 4
    events = [dict(s, op="sub") for s in subs[:first]]
    third = num_messages // 3
    for i, m in enumerate(msgs):
        if i == third:
            events += [{"op": "unsub", "id": s["id"]} for s in subs[0:first:4]]
        if i == third + 7:
            events += [dict(s, op="sub") for s in subs[first:]]
        if i == 2 * third + 3:  # re-subscribe two removed ids with another subscription's terms
            for old, donor in ((subs[0], subs[-1]), (subs[4], subs[-2])):
                events.append(dict(donor, op="sub", id=old["id"]))
        if i == num_messages * 3 // 4 + 5:  # replace a live subscription at one position: both lists share messages
            moved = dict(subs[3], op="sub", alpha=subs[3]["alpha"] * 0.9, k=subs[3]["k"] + 2)
            events += [{"op": "unsub", "id": subs[3]["id"]}, moved]
        events.append(dict(m, op="msg"))
    events.append({"op": "unsub", "id": subs[1]["id"]})
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def centralized_by_batch(inputs, window: dict, batch_size: int) -> list[dict[int, list[tuple[int, float]]]]:
    """The centralized engine's results after each micro-batch of ``batch_size`` messages: a
    batch ending after message ``h`` includes every command positioned at ``h + 1`` or earlier."""
    total = inputs.num_messages
    return centralized_at(inputs, window, list(range(batch_size, total, batch_size)) + [total])


def centralized_at(inputs, window: dict, ends: list[int]) -> list[dict[int, list[tuple[int, float]]]]:
    """The centralized engine's results after the messages ``[0, end)`` and every command
    positioned at ``end`` or earlier, for each of the nondecreasing ``ends``."""
    from skype import Engine

    engine = Engine(bounds=inputs.bounds, vocabulary=inputs.vocabulary, **window)
    engine.subscribe_batch(inputs.subscriptions)
    cursor, out = (0, 0, 0), []
    for end in ends:
        steps, cursor = inputs.steps_upto(cursor, end)
        for op, payload in steps:
            if op == "msgs":
                engine.publish_batch(payload)
            elif op == "sub":
                engine.subscribe_batch(payload)
            else:
                engine.unsubscribe(payload)
        out.append({sid: [(m.id, m.score) for m in matches] for sid, matches in engine.results()})
    return out


def oracle_check(oracle: Oracle, got: dict, subs: dict, context: str) -> None:
    """Every delivered top-k against the oracle's ranking (near-ties left to either order)."""
    assert set(got) == set(subs), f"{context}: subscriptions {sorted(set(got) ^ set(subs))}"
    for sid, k in subs.items():
        check_ranking(got[sid], oracle.ranking(sid), k, f"{context} subscription {sid}")


def oracle_by_batch(inputs, window: dict, batch: int):
    """Drive the independent oracle (``tests/oracle.py``; ``window``: ``{"window": N}`` or
    ``{"window_seconds": T}``) through the stream as the job's batches cut it; yields after each batch
    the oracle and the live subscriptions' k (commands at ``h + 1`` apply in the batch ending at
    ``h``, as :func:`spark_fixtures.centralized_by_batch`)."""
    vocab = max(len(inputs.vocabulary), 1) + 64
    b = inputs.bounds
    oracle = Oracle(bounds=(b.minx, b.miny, b.maxx, b.maxy), num_terms=vocab, max_subs=512, **window)
    live: dict[int, int] = {}

    def subscribe(b):
        for i in range(len(b)):
            ids, weights = b.terms.row(i)
            oracle.subscribe(int(b.ids[i]), float(b.x[i]), float(b.y[i]), int(b.k[i]), float(b.alpha[i]),
                             np.asarray(ids), np.asarray(weights))
            live[int(b.ids[i])] = int(b.k[i])

    subscribe(inputs.subscriptions)
    total = inputs.num_messages
    ends = list(range(batch, total, batch)) + [total]
    cursor = (0, 0, 0)
    for end in ends:
        steps, cursor = inputs.steps_upto(cursor, end)
        for op, payload in steps:
            if op == "msgs":
                for j in range(len(payload)):
                    ids, weights = payload.terms.row(j)
                    oracle.publish(int(payload.ids[j]), float(payload.x[j]), float(payload.y[j]),
                                   float(payload.t[j]), np.asarray(ids), np.asarray(weights))
            elif op == "sub":
                for sid in payload.ids.tolist():
                    if sid in live:
                        oracle.unsubscribe(sid)
                subscribe(payload)
            else:
                for sid in np.atleast_1d(payload).tolist():
                    oracle.unsubscribe(int(sid))
                    live.pop(int(sid), None)
        yield oracle, dict(live)


def fold_events_by_batch(rows: list[dict], num_batches: int | None = None) -> list[dict[int, list[tuple[int, float]]]]:
    """Events (dicts with ``batch``) -> the delivered top-k after each batch 0, 1, ... (a batch
    without events repeats the previous state)."""
    state: dict[int, dict[int, tuple[float, int]]] = {}
    out = []
    last = max((r["batch"] for r in rows), default=-1) if num_batches is None else num_batches - 1
    for batch in range(last + 1):
        # a subscription that moved within the batch (removed on one partition, created on
        # another) is removed before it is created again (as skype.dskype.results.folded_results)
        for r in sorted((r for r in rows if r["batch"] == batch), key=lambda r: 0 if r["removed"] and not r["created"] else 1):
            sid = r["sub"]
            if r["created"] or sid not in state:
                state[sid] = {}
            entries = state[sid]
            for m in r["left"]:
                del entries[m]
            for e in r["entered"]:
                entries[e["id"]] = (e["score"], e["seq"])
            if r["removed"]:
                del state[sid]
        out.append({sid: [(m, sc) for m, (sc, _) in sorted(ent.items(), key=lambda kv: (-kv[1][0], -kv[1][1]))]
                    for sid, ent in state.items()})
    return out


def results_of(path) -> dict[int, list[tuple[int, float]]]:
    return {sid: [(m.id, m.score) for m in matches] for sid, matches in io.read_results(path).items()}


def first_difference(got: dict, want: dict) -> str:
    for sid in sorted(set(got) | set(want)):
        if got.get(sid) != want.get(sid):
            return f"subscription {sid}: got {got.get(sid)}, want {want.get(sid)}"
    return ""


def np_equal(a, b) -> bool:
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


# --------------------------------------------------------------------------- the job without a JVM


class LocalPipeline:
    """The streaming job's own code (stream files -> source conversion -> routing -> both stateful
    processors, run by ``TwsTester`` -> events) driven batch by batch in this process.  Only
    Spark's shuffles are replaced (rows grouped by key here)."""

    def __init__(self, run_dir: Path, settings, inputs, engine_cache: str = "worker") -> None:
        pytest.importorskip("pyspark")
        from pyspark.sql.streaming.tws_tester import TwsTester

        from skype.spark import hosts
        from skype.spark.processors import MergeProcessor, PartitionProcessor
        from skype.dskype.routing import Router, routing_copy
        from skype.dskype.plan import plan_run
        from skype.spark.runtime import partition_configs, summary_dir_of

        self.plan = plan_run(run_dir, settings, inputs)
        self.settings = settings
        token = hosts.new_token()
        from skype.spark.runtime import rebalance_dir_of

        self.routers = [Router(routing_copy(pipe.distribution), pipe.partition_keys, summary_dir_of(self.plan, pipe),
                               pipeline=pipe.index, tables_dir=rebalance_dir_of(self.plan, pipe))
                        for pipe in self.plan.pipelines]

        # adaptive pipelines: table versions recorded when a batch is planned, as the source does
        self.table_dirs = {pipe.index: d for pipe in self.plan.pipelines
                           if (d := rebalance_dir_of(self.plan, pipe)) is not None}
        self.tables: dict = {}
        self.partitions = TwsTester(PartitionProcessor(token, partition_configs(self.plan), engine_cache))
        buckets = {key: (pipe.index, b) for pipe in self.plan.pipelines for b, key in enumerate(pipe.bucket_keys)}
        self.merge = TwsTester(MergeProcessor(token, buckets, engine_cache))
        self.messages, self.commands = self._stream()
        self.position = 0
        self.commands_sent = False
        self.metrics: list[list[dict]] = []
        self.events: dict[int, list[dict]] = {}
        self.final: dict[int, list[bytes]] = {}  # final-results blobs of the last batch, by pipeline
        self.answers: dict[int, list[str]] = {}  # snapshot query answer lines, by pipeline
        self.batch = 0

    def _stream(self):
        import pyarrow as pa

        from skype.spark.readers import read_stream_file, to_events

        def read(directory: str, kind: str):
            tables = [read_stream_file(str(p), kind) for p in sorted(Path(directory).iterdir())]
            return pa.concat_tables(tables) if tables else None

        messages = read(self.plan.messages_dir, "messages")
        commands = read(self.plan.commands_dir, "commands")
        return messages, (to_events(commands, "commands", 0) if commands is not None else None)

    def partition_rows(self):
        """Routed rows of the next batch, grouped by partition key (two input partitions)."""
        from pyspark.sql import Row

        from skype.dskype.routing import route_arrow, tables_events
        from skype.spark.readers import to_events
        from skype.spark.sources import newest_tables

        end = min(self.position + self.settings.control.batch_size, self.messages.num_rows)
        half = (self.position + end) // 2
        inputs = [to_events(self.messages.slice(self.position, half - self.position), "messages", self.position),
                  to_events(self.messages.slice(half, end - half), "messages", half)]
        if not self.commands_sent and self.commands is not None:
            inputs.append(self.commands)
            self.commands_sent = True
        if self.table_dirs:  # the control events of the batch's table versions, in every piece
            before = self.tables  # in force during the batch: what the previous batch announced
            self.tables = newest_tables(self.table_dirs, self.tables)
            control = tables_events({int(p): (int(before.get(p, v)), v) for p, v in self.tables.items()})
            inputs = [b for piece in inputs for b in (control, piece)]
        self.position = end
        grouped: dict[int, list] = {}
        for out in route_arrow(self.routers, iter(inputs)):
            for row in out.to_pylist():
                grouped.setdefault(row["key"], []).append(Row(**row))
        return grouped

    def done(self) -> bool:
        return self.position >= self.messages.num_rows

    def step(self, before_partition=None) -> dict:
        """Run one micro-batch; ``before_partition(key, rows)`` may interfere (fault injection).
        Returns the delivered top-k after the batch (of the first pipeline; all in ``results``)."""
        from skype.spark.sink import events_table

        stage2: dict[int, list] = {}
        blobs: dict[int, list[bytes]] = {pipe.index: [] for pipe in self.plan.pipelines}
        metrics = []
        final: dict[int, list[bytes]] = {}
        for key, rows in sorted(self.partition_rows().items()):
            if before_partition is not None:
                before_partition(key, rows)
            for out in self.partitions.test(key, rows):
                if out.kind in ("reports", "results-request"):
                    stage2.setdefault(out.key, []).append(out)
                elif out.kind == "events":
                    blobs[out.pipeline].append(bytes(out.payload))
                elif out.kind == "results":
                    final.setdefault(out.pipeline, []).append(bytes(out.payload))
                elif out.kind == "answers":
                    self.answers.setdefault(out.pipeline, []).extend(bytes(out.payload).decode().splitlines())
                else:
                    metrics.append(json.loads(out.payload))
        for key, rows in sorted(stage2.items()):
            for out in self.merge.test(key, rows):
                if out.kind == "events":
                    blobs[out.pipeline].append(bytes(out.payload))
                elif out.kind == "results":
                    final.setdefault(out.pipeline, []).append(bytes(out.payload))
                else:
                    metrics.append(json.loads(out.payload))
        if final:
            self.final = final
        for pipeline, parts in blobs.items():
            self.events.setdefault(pipeline, []).extend(events_table(parts, self.batch).to_pylist())
        self.metrics.append(metrics)
        self.batch += 1
        self.results = {i: fold_events_by_batch(ev)[-1] if ev else {} for i, ev in self.events.items()}
        return self.results[0]

    def final_results(self, pipeline: int = 0) -> dict[int, list[tuple[int, float]]]:
        """The final top-k the stateful stages sent in the stream's last batch."""
        from skype.dskype.reports import results_lines

        rows = [json.loads(line) for line in results_lines(self.final.get(pipeline, []))]
        return {r["id"]: [(e["id"], e["score"]) for e in r["topk"]] for r in rows}

    def snapshot_state(self, key: int) -> dict:
        t = self.partitions
        return {"meta": t.peekValueState("meta", key), "log": t.peekMapState("log", key),
                "segments": t.peekMapState("segments", key)}

    def restore_state(self, key: int, saved: dict) -> None:
        """Put a partition's state store back (a task whose commit never happened)."""
        t = self.partitions
        if saved["meta"] is None:
            t.deleteState("meta", key)
        else:
            t.updateValueState("meta", key, saved["meta"])
        t.updateMapState("log", key, saved["log"])
        t.updateMapState("segments", key, saved["segments"])


def rotate_owners(directory, version: int, effective: int, shift: int) -> None:
    """A forced table version of a live-rebalancing run (``directory``: its rebalance folder):
    every unit to the partition ``shift`` further on, effective from message ``effective``."""
    import dataclasses

    from skype.dskype.handover import TableVersion, VersionLog, write_version

    base = VersionLog(str(directory)).upto(0)[0].locator
    P = int(base.owner.max()) + 1
    locator = dataclasses.replace(base, owner=((base.owner + shift) % P).astype(np.int32))
    write_version(directory, TableVersion(version, effective, -1, locator))
