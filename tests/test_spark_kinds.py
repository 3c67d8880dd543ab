"""The query kinds (range, knn, terms) and until on the Spark job, against the centralized engine.

The job's own code runs without a JVM (``spark_fixtures.LocalPipeline``: stream files, routing,
both stateful processors under ``TwsTester``); the centralized engine runs the same inputs and
the same batch cuts.  After every batch, the delivered range and knn results (folded events) must
equal the centralized ones; at the end every kind's final results (sent by the stateful stages)
must equal ``simulate --results-out``'s records.  The workload mixes the four kinds, ``until`` on
every kind, subscribes and unsubscribes mid-stream, and adversarial queries: rectangles spanning
the whole space (every location partition's boundary), kNN points in empty corners whose nearest
matches sit in other partitions' cells, and expressions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from skype import io
from skype.simulate import load_inputs
from skype.data import make_workload
from skype.data.peer_workloads import peer_subscriptions
from skype.errors import InputError
from skype.run import build_parser
from spark_fixtures import LocalPipeline, first_difference, rotate_owners

pytestmark = pytest.mark.spark

BATCH = 300
WINDOW = ["--window", "400"]


def _workload(path: Path, *, bare: bool = True) -> Path:
    """Events: mixed kinds first, more mid-stream, unsubscribes, untils, adversarial queries."""
    w = make_workload("tweets", num_subs=80, num_messages=1200, seed=5, k=5)
    rng = np.random.default_rng(7)
    topk, others = peer_subscriptions(w.messages, w.vocabulary, 80, rng, kinds={"topk": 1, "range": 1, "knn": 1,
                                      "terms": 1}, area=0.02, k=4, bounds=w.bounds, first_id=0)
    b = w.bounds
    msgs = list(io.message_objects(w.messages, w.vocabulary))
    words = [t for t in msgs[0]["terms"]][:2] if isinstance(msgs[0].get("terms"), dict) else ["love", "day"]
    t_mid = float(w.messages.t[700])
    extra = [  # adversarial: the whole space, empty corners, an expression, lifetimes
        {"id": 1000, "kind": "range", "rect": [b.minx, b.miny, b.maxx, b.maxy], "terms": words, "match": "any"},
        {"id": 1001, "kind": "knn", "x": b.minx, "y": b.miny, "k": 3, "terms": words[:1]},
        {"id": 1002, "kind": "knn", "x": b.maxx, "y": b.maxy, "k": 6, "match": " OR ".join(words)},
        {"id": 1003, "kind": "range", "rect": [b.minx, b.miny, b.maxx, b.maxy], "terms": words[:1], "until": t_mid},
        {"id": 1004, "kind": "knn", "x": (b.minx + b.maxx) / 2, "y": (b.miny + b.maxy) / 2, "k": 5,
         "terms": words, "match": "all", "until": float(w.messages.t[400])},
    ]
    if bare:
        extra += [{"id": 1005, "kind": "terms", "rect": [b.minx, b.miny, b.maxx, b.maxy], "k": 5},
                  {"id": 1006, "kind": "knn", "x": b.maxx, "y": b.miny, "k": 4},
                  {"id": 1007, "kind": "range", "rect": [b.minx, b.miny, (b.minx + b.maxx) / 2, b.maxy]}]
    objs = [dict(s, op="sub") for s in io.subscription_objects(topk, w.vocabulary)]
    objs += [dict(_record(s), op="sub") for s in others if bare or s.kind != "terms"]
    objs += [dict(e, op="sub") for e in extra]
    objs[0]["until"] = float(w.messages.t[500])  # a topk lifetime
    late = objs[len(objs) // 2:]
    events = [o for o in objs[:len(objs) // 2]]
    for i, m in enumerate(msgs):
        if i == 350:
            events += late
        if i == 600:  # unsubscribe a few of every kind; re-subscribe one id as another kind
            events += [{"op": "unsub", "id": o["id"]} for o in objs[1:60:9] if o["id"] < 1000]
            events.append(dict(extra[1], op="sub", id=objs[10]["id"], x=b.maxx, y=b.maxy))
        events.append(dict(m, op="msg"))
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _record(sub) -> dict:
    d = {"id": sub.id, "kind": sub.kind}
    for name in ("rect", "x", "y", "k", "terms", "match", "until"):
        value = getattr(sub, name, None)
        if value is not None:
            d[name] = list(value) if name == "rect" else value
    return d


def _inputs(path: Path, method: str, partitions: int = 4, window: list[str] = WINDOW):
    from skype.dskype.plan import RunSettings
    from skype.dskype import kinds

    args = build_parser().parse_args(["distributed", "--events", str(path), "--method", method, "--partitions",
                                      str(partitions), "--batch-size", str(BATCH), *window])
    inputs = load_inputs(vars(args))
    kinds.refuse(inputs, [method])
    settings = RunSettings.from_options(vars(args), inputs.bounds)
    settings.distribution.engine_options.update(kinds.engine_options(inputs))
    return inputs, settings


def _centralized(inputs, batch: int, window: dict):
    """The centralized engine's results of every kind after each batch (as the job cuts them),
    as results-file records by id."""
    from skype import Engine

    engine = Engine(bounds=inputs.bounds, vocabulary=inputs.vocabulary, snapshots=True, **window)
    engine.subscribe_batch(inputs.subscriptions)
    engine.subscribe_batch(inputs.others)
    total = inputs.num_messages
    ends = list(range(batch, total, batch)) + [total]
    cursor, out = (0, 0, 0), []
    for end in ends:
        steps, cursor = inputs.steps_upto(cursor, end)
        for op, payload in steps:
            if op == "msgs":
                engine.publish_batch(payload)
            elif op == "sub":
                engine.subscribe_batch(payload)
            elif op == "ksub":
                engine.subscribe_batch([payload])
            else:
                engine.unsubscribe(payload)
        results = list(engine.results_by_kind())
        records = {r["id"]: r for r in io.kind_result_objects(results)}
        out.append({sid: (kind, records[sid]) for sid, kind, _ in results})
    return out


def _delivered(records: dict) -> dict:
    """Range and knn results as the folded events show them: (id, score) in ranking order."""
    out = {}
    for sid, (kind, r) in records.items():
        if kind == "range":
            out[sid] = [(m, 0.0) for m in r["matches"]]
        elif kind == "knn":
            out[sid] = [(e["id"], -e["distance"]) for e in r["topk"]]
    return out


def _run(tmp_path: Path, method: str, events: Path, faults: bool = False, time_window: bool = False,
         moves: tuple[int, ...] = ()):
    """Run the job batch by batch against the centralized engine; with ``faults``, every host
    object is dropped before batch 1 and one partition's commit of batch 2 is lost after its host
    applied it: both rebuild from durable state (hosted specs included).  ``moves`` (adaptive
    methods): before each of these batches every unit changes owner (a forced table version), so
    the batch hands every subscription of every kind over."""
    from skype.dskype import kinds
    from skype.spark.hosts import InProcessHosts
    from skype.dskype.reports import results_lines

    window = WINDOW
    if time_window:  # about 400 messages' worth of the stream's time
        t = load_inputs(vars(build_parser().parse_args(["distributed", "--events", str(events)]))).messages().t
        window = ["--window-seconds", str(float(t[400] - t[0]))]
    inputs, settings = _inputs(events, method, window=window)
    kind_of = kinds.kind_map(inputs)
    want = _centralized(inputs, BATCH, settings.window.centralized())
    pipe = LocalPipeline(tmp_path / method, settings, inputs)
    if moves:
        from skype.dskype.rebalancing import attach, rebalance_dir

        attach(pipe.plan, "never", inputs)  # version 0: the build's tables
    retried: list[int] = []

    def lose_commit(key, rows):
        if faults and pipe.batch == 2 and not retried:
            saved = pipe.snapshot_state(key)
            pipe.partitions.test(key, rows)
            pipe.restore_state(key, saved)
            retried.append(key)

    for b in range(len(want)):
        if faults and b == 1:
            InProcessHosts.clear()
        if b in moves:
            rotate_owners(rebalance_dir(pipe.plan.run_dir, method), moves.index(b) + 1, pipe.position, moves.index(b) + 1)
        pipe.step(before_partition=lose_commit)
        assert set(pipe.results[0]) == set(want[b]), f"{method} batch {b}: subscriptions differ"
        expect = _delivered(want[b])
        got = {s: v for s, v in pipe.results[0].items() if s in expect}
        assert got == expect, f"{method} batch {b}: {first_difference(got, expect)}"
    assert pipe.done()
    for b in moves:  # the forced versions, announced by batch b, really handed subscriptions over in b + 1
        assert sum(m.get("handover_in", 0) for m in pipe.metrics[b + 1] if m["stage"] == "partition") > 0, b
    lines = [json.loads(line) for line in results_lines(pipe.final[0])]
    from skype.model import Match

    final = {r["id"]: r for r in kinds.result_objects(
        ((r["id"], [Match(e["id"], e["score"]) for e in r["topk"]]) for r in lines), kind_of, inputs.vocabulary)}
    last = {sid: r for sid, (_, r) in want[-1].items()}
    assert final == last, f"{method} final: {first_difference(final, last)}"
    return last, kind_of


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    return _workload(tmp_path_factory.mktemp("spark-kinds") / "events.jsonl")


@pytest.fixture(scope="module")
def keyed_events(tmp_path_factory):
    return _workload(tmp_path_factory.mktemp("spark-kinds-keyed") / "events.jsonl", bare=False)


@pytest.mark.parametrize("method,time_window", [("hashing", False), ("location", False), ("hashing", True)])
def test_spark_kinds_every_kind_exact_on_broadcast_methods(method, time_window, events, tmp_path):
    final, kind_of = _run(tmp_path, method, events, time_window=time_window)
    for kind in ("range", "knn", "terms"):  # the check is not vacuous
        assert sum(len(next(iter(v for k, v in final[s].items() if k != "id")))
                   for s in final if kind_of.get(s) == kind) > 10, kind
    assert 1003 not in final and 1004 not in final and 0 not in final  # until ended them


@pytest.mark.parametrize("method", ["agrid", "kdt"])
def test_spark_kinds_every_kind_exact_on_adaptive_methods_through_hand_overs(method, events, tmp_path):
    """The adaptive methods route everywhere and host each subscription once, so they serve every
    kind; every unit changes owner twice mid-stream, and each hand-over re-registers range, knn
    and terms subscriptions on their new owners: exact after every batch and at the end."""
    final, kind_of = _run(tmp_path, method, events, moves=(1, 2))  # the second announced while the first applies
    assert {kind_of.get(s) for s in final} >= {"range", "knn", "terms"}


@pytest.mark.parametrize("method,events_kind", [("location", "events"), ("keyword", "keyed_events")])
def test_spark_kinds_rebuild_from_durable_state_after_lost_cache_and_commit(method, events_kind, request, tmp_path):
    final, _ = _run(tmp_path, method, request.getfixturevalue(events_kind), faults=True)
    assert final


@pytest.mark.parametrize("method,time_window", [("keyword", False), ("prefix", False), ("spatial-first", False),
                                                ("keyword-first", False), ("keyword", True)])
def test_spark_kinds_range_and_knn_with_terms_exact_on_term_methods(method, time_window, keyed_events, tmp_path):
    final, kind_of = _run(tmp_path, method, keyed_events, time_window=time_window)
    assert sum(len(final[s]["matches"]) for s in final if kind_of.get(s) == "range") > 10


@pytest.mark.parametrize("method", ["keyword", "prefix", "spatial-first", "keyword-first"])
def test_spark_kinds_refused_where_a_method_cannot_serve_them(method, events):
    with pytest.raises(InputError) as err:
        _inputs(events, method)
    assert err.value.code == "E048" and method in str(err.value) and "terms" in str(err.value)



def test_spark_kinds_terms_refused_on_a_run_that_may_not_reach_the_end(events, keyed_events):
    """Results folded from events would hold a terms entry's count from when it entered."""
    from skype.dskype import kinds

    args = build_parser().parse_args(["distributed", "--events", str(events), *WINDOW])
    with pytest.raises(InputError) as err:
        kinds.refuse(load_inputs(vars(args)), ["hashing"], open_end=True)
    assert err.value.code == "E048" and "'terms'" in str(err.value) and "--stop-after-batches" in str(err.value)
    args = build_parser().parse_args(["distributed", "--events", str(keyed_events), *WINDOW])
    kinds.refuse(load_inputs(vars(args)), ["hashing"], open_end=True)  # range, knn and topk: served
