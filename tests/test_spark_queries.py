"""Snapshot queries (``{"op": "query"}``) on the Spark job, against ``simulate --answers-out``.

The job's own code runs without a JVM (``spark_fixtures.LocalPipeline``: stream files, routing,
both stateful processors under ``TwsTester``); its answer lines are merged into the answers file
as the driver does (:func:`skype.dskype.snapshots.write_answers`) and must equal, line for line,
what ``simulate`` writes for the same inputs (the core engine), and the brute-force reference's
answers.  The workload mixes the four subscription kinds with queries of the four kinds: with and
without terms, with ``last``, at position 0, at batch borders, right after the window's first
expiry, mid-batch and after the last message.  One test runs the real job (the shared session)
through ``distributed --answers-out`` on a peers' workload made by ``generate``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from skype import io
from skype.simulate import load_inputs
from skype.data import make_workload
from skype.data.peer_workloads import peer_queries, peer_subscriptions
from skype.errors import InputError, OperationalError
from skype.run import build_parser
from spark_fixtures import LocalPipeline, rotate_owners

pytestmark = pytest.mark.spark

BATCH = 300
WINDOW = 400
# where the queries go: the start, batch borders (300, 600, 900), right after the first expiry
# (message 400 pushes message 0 out), mid-batch, and after the last message (1200)
POSITIONS = (0, 1, 299, 300, 301, 400, 401, 555, 600, 899, 900, 1100, 1200)


def _workload(path: Path, *, bare: bool, terms: bool = False) -> Path:
    """Events: mixed subscriptions, then the messages with queries of every kind at POSITIONS
    (``bare``: range and knn queries without terms too; ``terms``: terms queries)."""
    w = make_workload("tweets", num_subs=40, num_messages=1200, seed=11, k=5)
    rng = np.random.default_rng(3)
    topk, others = peer_subscriptions(w.messages, w.vocabulary, 40, rng, kinds={"topk": 1, "range": 1, "knn": 1},
                                      area=0.02, k=4, bounds=w.bounds, first_id=0)
    terms = terms or bare
    kinds = {"topk": 1, "range": 1, "knn": 1, **({"terms": 1} if terms else {})}
    asked = peer_queries(w.messages, w.vocabulary, 4 * len(POSITIONS), rng, kinds=kinds, area=0.05, k=6,
                         bounds=w.bounds)
    b = w.bounds
    words = ["love", "day"]
    asked += [  # adversarial: the whole space, an empty corner, an expression, last
        {"op": "query", "kind": "range", "rect": [b.minx, b.miny, b.maxx, b.maxy], "terms": words},
        {"op": "query", "kind": "knn", "x": b.minx, "y": b.miny, "k": 3, "terms": words[:1]},
        {"op": "query", "kind": "knn", "x": b.maxx, "y": b.maxy, "k": 7, "match": " OR ".join(words)},
        {"op": "query", "kind": "topk", "x": b.maxx, "y": b.maxy, "k": 8, "alpha": 0.3, "text": "love the day"},
        {"op": "query", "kind": "range", "rect": [b.minx, b.miny, b.maxx, b.maxy], "terms": words,
         "last": float(w.messages.t[150] - w.messages.t[0])},
        {"op": "query", "kind": "knn", "x": 0.0, "y": 0.0, "k": 5, "terms": words, "match": "all",
         "last": float(w.messages.t[90] - w.messages.t[0])},
    ]
    if terms:
        asked += [{"op": "query", "kind": "terms", "rect": [b.minx, b.miny, b.maxx, b.maxy], "k": 5},
                  {"op": "query", "kind": "terms", "rect": [b.minx, b.miny, b.maxx, b.maxy], "k": 4,
                   "last": float(w.messages.t[60] - w.messages.t[0])}]
    if bare:
        asked += [{"op": "query", "kind": "knn", "x": b.maxx, "y": b.miny, "k": 4},
                  {"op": "query", "kind": "range", "rect": [b.minx, b.miny, (b.minx + b.maxx) / 2, b.maxy]}]
    for i, q in enumerate(asked):
        q["qid"] = 5000 + i
    events = [dict(s, op="sub") for s in io.subscription_objects(topk, w.vocabulary)]
    events += [dict(_record(s), op="sub") for s in others]
    slots = {p: [] for p in POSITIONS}
    for i, q in enumerate(asked):
        slots[POSITIONS[i % len(POSITIONS)]].append(q)
    for i, m in enumerate(io.message_objects(w.messages, w.vocabulary)):
        events += slots.get(i, [])
        events.append(dict(m, op="msg"))
    events += slots[len(w.messages)]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _record(sub) -> dict:
    d = {"id": sub.id, "kind": sub.kind}
    for name in ("rect", "x", "y", "k", "terms", "match"):
        value = getattr(sub, name, None)
        if value is not None:
            d[name] = list(value) if name == "rect" else value
    return d


def _settings(path: Path, method: str, window: list[str], partitions: int = 4, summaries: str = "off"):
    from skype.dskype.plan import RunSettings
    from skype.dskype import kinds

    args = build_parser().parse_args(["distributed", "--events", str(path), "--method", method, "--partitions",
                                      str(partitions), "--batch-size", str(BATCH), "--summaries", summaries,
                                      *window])
    inputs = load_inputs(vars(args))
    kinds.refuse(inputs, method.split(","))
    settings = RunSettings.from_options(vars(args), inputs.bounds)
    settings.distribution.engine_options.update(kinds.engine_options(inputs))
    return inputs, settings


def _simulate(path: Path, window: list[str], out: Path, engine: str = "core") -> list[dict]:
    from skype.simulate import make_engine, run_stream

    args = build_parser().parse_args(["simulate", "--events", str(path), "--engine", engine, *window])
    inputs = load_inputs(vars(args))
    run_stream(make_engine(vars(args), inputs), inputs, batch_size=BATCH, progress=False, answers_out=str(out))
    return [json.loads(line) for line in out.read_text().splitlines()]


def _window(path: Path, time_window: bool) -> list[str]:
    if not time_window:
        return ["--window", str(WINDOW)]
    t = load_inputs(vars(build_parser().parse_args(["simulate", "--events", str(path)]))).messages().t
    return ["--window-seconds", str(float(t[WINDOW] - t[0]))]


def _run(tmp_path: Path, method: str, events: Path, time_window: bool = False, faults: bool = False,
         moves: tuple[int, ...] = (), engine: str = "core") -> list[dict]:
    """The job's answers file (LocalPipeline to the end, answers merged as the driver does)."""
    from skype.spark.hosts import InProcessHosts

    window = _window(events, time_window)
    inputs, settings = _settings(events, method, window)
    settings.distribution.engine = engine
    pipe = LocalPipeline(tmp_path / method, settings, inputs)
    from skype.dskype.rebalancing import attach, rebalance_dir

    if pipe.plan.pipelines[0].distribution.capabilities.adaptive:
        attach(pipe.plan, "never", inputs)  # version 0: the build's tables
    retried: list[int] = []

    def lose_commit(key, rows):  # a partition's batch applied on its host, its commit lost: replayed
        if faults and pipe.batch == 2 and not retried:
            saved = pipe.snapshot_state(key)
            pipe.partitions.test(key, rows)
            pipe.restore_state(key, saved)
            retried.append(key)

    batch = 0
    while not pipe.done():
        if faults and batch == 1:
            InProcessHosts.clear()
        if batch in moves:  # every unit to another owner: every subscription handed over
            rotate_owners(rebalance_dir(pipe.plan.run_dir, method), moves.index(batch) + 1, pipe.position,
                          moves.index(batch) + 1)
        pipe.step(before_partition=lose_commit)
        batch += 1
    return _answers_file(tmp_path, pipe, inputs, 0)


def _answers_file(tmp_path: Path, pipe: LocalPipeline, inputs, index: int) -> list[dict]:
    """Pipeline ``index``'s answers file, merged from its answer lines as the driver does."""
    from skype.dskype import snapshots

    pipeline = pipe.plan.pipelines[index]
    directory = pipe.plan.answers_dir_of(pipeline)
    # every answering task's lines, as the sink writes them (a replayed batch's lines count once)
    snapshots.write_part(directory, 0, "00000", pipe.answers.get(index, []))
    out = tmp_path / f"{pipeline.method}.answers.jsonl"
    asked = snapshots.asked_queries(inputs)
    n = snapshots.write_answers(out, directory, asked, pipe.settings.distribution.partitions,
                                pipeline.distribution.capabilities.whole_window)
    assert n == len(asked)
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    return _workload(tmp_path_factory.mktemp("spark-queries") / "events.jsonl", bare=True)


@pytest.fixture(scope="module")
def keyed_events(tmp_path_factory):
    return _workload(tmp_path_factory.mktemp("spark-queries-keyed") / "events.jsonl", bare=False)


@pytest.fixture(scope="module")
def counted_events(tmp_path_factory):
    return _workload(tmp_path_factory.mktemp("spark-queries-counted") / "events.jsonl", bare=False, terms=True)


@pytest.fixture(scope="module")
def expected(events, keyed_events, counted_events, tmp_path_factory):
    """simulate's answers (core engine), checked once against the reference engine's."""
    d = tmp_path_factory.mktemp("spark-queries-simulate")
    out = {}
    for name, path in (("bare", events), ("keyed", keyed_events), ("counted", counted_events)):
        for time_window in (False, True):
            window = _window(path, time_window)
            core = _simulate(path, window, d / f"{name}-{time_window}.jsonl")
            ref = _simulate(path, window, d / f"{name}-{time_window}.ref.jsonl", engine="reference")
            assert _close(core, ref), f"{name} {time_window}: simulate's core and reference answers differ"
            out[name, time_window] = core
    return out


def _close(a: list[dict], b: list[dict]) -> bool:
    """Equal answers; scores and distances equal to 1e-9 (the reference scores in Python)."""
    if [(x["qid"], x["after"], x["kind"]) for x in a] != [(x["qid"], x["after"], x["kind"]) for x in b]:
        return False
    for x, y in zip(a, b):
        if x["kind"] in ("range", "terms"):
            if x["answer"] != y["answer"]:
                return False
        else:
            key = "distance" if x["kind"] == "knn" else "score"
            if [e["id"] for e in x["answer"]] != [e["id"] for e in y["answer"]] or not np.allclose(
                    [e[key] for e in x["answer"]], [e[key] for e in y["answer"]], rtol=0, atol=1e-9):
                return False
    return True


def _first_difference(got: list[dict], want: list[dict]) -> str:
    for g, w in zip(got, want):
        if g != w:
            return f"query {w['qid']} after {w['after']} ({w['kind']}): got {g['answer']}, want {w['answer']}"
    return f"{len(got)} answers, want {len(want)}"


def test_spark_queries_workload_has_queries_where_they_are_hard(events, expected):
    answers = expected["bare", False]
    afters = {a["after"] for a in answers}
    assert {0, 300, 400, 401, 600, 1200} <= afters
    assert {a["kind"] for a in answers} == {"topk", "range", "knn", "terms"}
    assert sum(1 for a in answers if a["answer"]) > len(answers) // 2  # mostly non-empty answers


@pytest.mark.parametrize("method,time_window", [("hashing", False), ("location", False), ("location", True),
                                                ("agrid", False), ("kdt", True), ("qt", False), ("aqwa", False)])
def test_spark_queries_every_kind_exact_on_whole_window_methods(method, time_window, events, expected, tmp_path):
    got = _run(tmp_path, method, events, time_window)
    want = expected["bare", time_window]
    assert got == want, _first_difference(got, want)


@pytest.mark.parametrize("method,time_window", [("keyword", False), ("keyword", True), ("spatial-first", False),
                                                ("keyword-first", True), ("prefix", False), ("prefix", True)])
def test_spark_queries_with_terms_exact_on_term_methods(method, time_window, keyed_events, expected, tmp_path):
    got = _run(tmp_path, method, keyed_events, time_window)
    want = expected["keyed", time_window]
    assert got == want, _first_difference(got, want)


@pytest.mark.parametrize("method,time_window", [("keyword", False), ("keyword", True), ("prefix", True)])
def test_spark_queries_terms_exact_where_one_partition_owns_each_term(method, time_window, counted_events, expected,
                                                                     tmp_path):
    got = _run(tmp_path, method, counted_events, time_window)
    want = expected["counted", time_window]
    assert any(a["kind"] == "terms" and a["answer"] for a in want)
    assert got == want, _first_difference(got, want)


@pytest.mark.parametrize("method", ["hashing", "keyword"])
def test_spark_queries_on_reference_engine_partitions(method, counted_events, expected, tmp_path):
    """Partitions running the brute-force reference engine answer as simulate (to 1e-9 in scores)."""
    got = _run(tmp_path, method, counted_events, engine="reference")
    assert _close(got, expected["counted", False]), _first_difference(got, expected["counted", False])


def test_spark_queries_methods_side_by_side_each_write_their_answers(keyed_events, expected, tmp_path):
    inputs, settings = _settings(keyed_events, "location,keyword", ["--window", str(WINDOW)])
    pipe = LocalPipeline(tmp_path / "both", settings, inputs)
    while not pipe.done():
        pipe.step()
    for index in (0, 1):
        got = _answers_file(tmp_path, pipe, inputs, index)
        assert got == expected["keyed", False], (index, _first_difference(got, expected["keyed", False]))


@pytest.mark.parametrize("method", ["hashing", "keyword"])
def test_spark_queries_exact_after_lost_hosts_and_a_replayed_batch(method, events, keyed_events, expected,
                                                                   tmp_path):
    path, name = (events, "bare") if method == "hashing" else (keyed_events, "keyed")
    got = _run(tmp_path, method, path, faults=True)
    assert got == expected[name, False], _first_difference(got, expected[name, False])


def test_spark_queries_exact_through_hand_overs(events, expected, tmp_path):
    got = _run(tmp_path, "kdt", events, moves=(1, 2))  # announced in 1 and 2, in force from 2 and 3
    assert got == expected["bare", False], _first_difference(got, expected["bare", False])


@pytest.mark.parametrize("method,kind", [("keyword", "range without terms"), ("spatial-first", "knn without terms"),
                                         ("keyword-first", "terms"), ("spatial-first", "terms")])
def test_spark_queries_refused_where_no_exact_answer_is_served(method, kind, events):
    from skype.dskype import kinds, snapshots

    inputs = load_inputs(vars(build_parser().parse_args(["distributed", "--events", str(events)])))
    bare = kind.endswith("without terms")
    inputs.steps = [(op, p) for op, p in inputs.steps if op != "query" or (  # only the queries of that kind
        p["kind"] == kind.split()[0] and not (bare and snapshots.has_terms(p)))]
    with pytest.raises(InputError) as err:
        kinds.refuse(inputs, [method])
    assert err.value.code == "E135" and method in str(err.value) and f"({kind.split()[0]})" in str(err.value)


def test_spark_queries_refused_on_prefix_with_keyword_summaries_before_spark_starts(keyed_events, tmp_path):
    """prefix on a count window routes by keyword summaries (its default): refused before planning
    (nothing staged, no run.json recording the settings) and before a session is made (no
    ``spark`` is given, none is started); the fix the error names, ``--summaries off`` on the same
    run directory, then plans (no E028 for changed settings)."""
    from skype import spark as dskype_on_spark
    from skype.dskype.plan import plan_run

    inputs, settings = _settings(keyed_events, "prefix", ["--window", str(WINDOW)], summaries="active")
    with pytest.raises(InputError) as err:
        dskype_on_spark.run(settings, inputs, None, run_dir=tmp_path / "run", master="no-such-master")
    assert err.value.code == "E135" and "summaries" in str(err.value)
    assert not (tmp_path / "run").exists()
    inputs, settings = _settings(keyed_events, "prefix", ["--window", str(WINDOW)], summaries="off")
    assert [pipe.method for pipe in plan_run(tmp_path / "run", settings, inputs).pipelines] == ["prefix"]


def test_spark_queries_answers_out_needs_a_staged_stream_and_the_file_sink(events, tmp_path):
    from skype import spark as dskype_on_spark

    inputs, settings = _settings(events, "hashing", ["--window", str(WINDOW)])
    settings.sink.kind = "console"
    with pytest.raises(InputError) as err:
        dskype_on_spark.run(settings, inputs, None, run_dir=tmp_path / "run", answers_out=str(tmp_path / "a.jsonl"))
    assert err.value.code == "E136" and not (tmp_path / "run").exists()


def test_spark_queries_missing_answers_are_an_error_not_a_short_file(tmp_path):
    from skype.dskype import snapshots

    directory = tmp_path / "answers"
    snapshots.write_part(directory, 3, "00000", [json.dumps({"n": 0, "p": 0, "answer": [7], "seq": [9]})])
    asked = [{"qid": 1, "after": 5, "kind": "range", "k": 0}, {"qid": 2, "after": 6, "kind": "range", "k": 0}]
    with pytest.raises(OperationalError) as err:
        snapshots.write_answers(tmp_path / "a.jsonl", directory, asked, 4, whole_window=True)
    assert err.value.code == "E137" and "[2]" in str(err.value)
    with pytest.raises(OperationalError):  # a partitioned window needs every partition's answer
        snapshots.write_answers(tmp_path / "a.jsonl", directory, asked[:1], 4, whole_window=False)
    # a replayed batch rewrites its file under a fresh temporary name: no duplicate, no torn line
    snapshots.write_part(directory, 3, "00000", [json.dumps({"n": 0, "p": 0, "answer": [7], "seq": [9]})])
    assert sorted(p.name for p in directory.iterdir()) == ["batch-00000003-part-00000.jsonl"]
    snapshots.write_answers(tmp_path / "a.jsonl", directory, asked[:1], 4, whole_window=True)
    assert json.loads((tmp_path / "a.jsonl").read_text()) == {"qid": 1, "after": 5, "kind": "range", "answer": [7]}


def test_spark_queries_partial_answers_merge_as_the_reference_ranks():
    from skype.dskype.snapshots import merge_partials

    parts = [{"answer": [{"id": 1, "score": 0.5}, {"id": 2, "score": 0.4}], "seq": [10, 3]},
             {"answer": [{"id": 3, "score": 0.5}, {"id": 2, "score": 0.4}], "seq": [12, 3]}]
    # equal scores: the newer message first; a message on two partitions once; cut to k
    assert merge_partials("topk", 2, parts) == [{"id": 3, "score": 0.5}, {"id": 1, "score": 0.5}]
    knn = [{"answer": [{"id": 1, "distance": 2.0}], "seq": [4]}, {"answer": [{"id": 5, "distance": 2.0}], "seq": [8]}]
    assert merge_partials("knn", 5, knn) == [{"id": 5, "distance": 2.0}, {"id": 1, "distance": 2.0}]
    rng = [{"answer": [9, 4], "seq": [20, 6]}, {"answer": [7, 4], "seq": [11, 6]}]
    assert merge_partials("range", 0, rng) == [9, 7, 4]


def test_spark_queries_generated_peer_workload_through_distributed(spark, tmp_path):
    """The issue's target: ``generate --sub-kinds topk,range,knn,terms --queries N``, run through
    ``distributed --answers-out`` on the shared session, equals ``simulate --answers-out``."""
    from skype.run import main

    files = {name: tmp_path / f"{name}.jsonl" for name in ("m", "s", "e")}
    assert main(["generate", "--dataset", "tweets", "--num-subs", "60", "--num-messages", "900", "--seed", "2",
                 "--sub-kinds", "topk,range,knn,terms", "--k", "5", "--queries", "24", "--messages-out",
                 str(files["m"]), "--subscriptions-out", str(files["s"]), "--events-out", str(files["e"])]) == 0
    common = ["--subscriptions", str(files["s"]), "--events", str(files["e"]), "--window", "300"]
    assert main(["simulate", *common, "--answers-out", str(tmp_path / "sim.jsonl")]) == 0
    args = build_parser().parse_args(["distributed", *common, "--method", "location", "--partitions", "2",
                                      "--batch-size", "200", "--checkpoint", str(tmp_path / "run"),
                                      "--answers-out", str(tmp_path / "dist.jsonl")])
    from skype.spark.job import run_options

    run_options(vars(args), spark)
    want = [json.loads(line) for line in (tmp_path / "sim.jsonl").read_text().splitlines()]
    got = [json.loads(line) for line in (tmp_path / "dist.jsonl").read_text().splitlines()]
    assert len(want) == 24 and got == want, _first_difference(got, want)


def _lonely_term_events(path: Path) -> Path:
    """Message 0 alone holds ``zebra``; the others hold ``common`` and ``word``: the partition of
    ``zebra`` (term methods) hears of no later message, so its engine's clock stays at message 0
    unless the query sets it.  Queries on ``zebra`` before and right after message 0 expires."""
    events = []
    zebra = [{"op": "query", "kind": "range", "rect": [-180, -90, 180, 90], "terms": ["zebra"]},
             {"op": "query", "kind": "knn", "x": 0.0, "y": 0.0, "k": 3, "terms": ["zebra"]},
             {"op": "query", "kind": "topk", "x": 0.0, "y": 0.0, "k": 3, "alpha": 0.5, "text": "zebra"},
             {"op": "query", "kind": "range", "rect": [-180, -90, 180, 90], "terms": ["zebra", "word"],
              "last": 30.5}]
    for i in range(450):
        if i in (1, 300, 400, 401, 449):
            events += [dict(q, qid=1000 * i + j) for j, q in enumerate(zebra)]
        text = "zebra apple" if i == 0 else "common word"
        events.append({"op": "msg", "id": i, "x": float(i % 17), "y": float(i % 13), "t": float(i), "text": text})
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.mark.parametrize("method,time_window", [("keyword", False), ("keyword", True), ("hashing", False)])
def test_spark_queries_right_after_expiry_on_a_partition_that_heard_nothing_since(method, time_window, tmp_path):
    events = _lonely_term_events(tmp_path / "events.jsonl")
    window = _window(events, time_window)
    want = _simulate(events, window, tmp_path / "simulate.jsonl")
    assert [a["answer"] for a in want if a["qid"] in (300000, 401000)] == [[0], []]  # the case is the one meant
    got = _run(tmp_path, method, events, time_window)
    assert got == want, _first_difference(got, want)


@pytest.mark.parametrize("method", ["hashing", "location", "keyword", "prefix", "spatial-first", "keyword-first",
                                    "agrid", "kdt"])
def test_spark_queries_whole_window_is_what_the_routing_does(method, tweets_small):
    """The capability table's ``whole_window`` (one partition answers a query) holds exactly where
    the router sends every message to every partition; and a query goes to partition 0 there, to
    every partition elsewhere."""
    from skype.dskype import codec
    from skype.dskype.codec import OP_QUERY, Commands
    from skype.dskype.routing import Router, routes_everywhere
    from skype.dskype.staging import _id_only
    from skype.partitioning import build_distribution, capabilities_of

    w = tweets_small
    params = {"summary": False} if method in ("keyword", "prefix", "spatial-first", "keyword-first") else {}
    dist = build_distribution(method, 4, w.subscriptions, w.messages.slice(0, 500), w.vocabulary, None, **params)
    router = Router(dist, list(range(4)))
    msgs = w.messages.slice(500, 900)
    query = Commands([0, 1], [700, 701], [OP_QUERY] * 2, _id_only(5).take(np.array([0, 0])), [0, 0],
                     np.array(['{"query": 5}', '{"query": 6}'], object))
    query.subs.ids[:] = [5, 6]  # ordinals 5 and 6
    parts = router.route(msgs, np.arange(500, 900), query)
    everyone = all(len(codec.unpack_messages(parts[p].messages)[0]) == len(msgs) for p in range(4))
    assert capabilities_of(method).whole_window == everyone, method
    assert routes_everywhere(dist) <= everyone
    asked = {p: sorted(c.subs.ids[c.op == OP_QUERY].tolist()) for p in range(4) if parts[p].commands
             for c in [Commands.unpack(parts[p].commands)]}
    asked = {p: ids for p, ids in asked.items() if ids}
    assert asked == ({1: [5], 2: [6]} if everyone else {p: [5, 6] for p in range(4)}), method


def test_spark_queries_without_a_compiled_spec_are_dead_letters_and_raw_ingestion_refuses_them(tweets_small):
    from skype.dskype.codec import OP_QUERY, Commands
    from skype.dskype.records import _command_row
    from skype.dskype.screening import screen
    from skype.dskype.staging import _id_only

    from skype.dskype.snapshots import lower_query

    w = tweets_small
    b = w.bounds
    spec, _ = lower_query({"kind": "range", "rect": [b.minx, b.miny, b.maxx, b.maxy]}, 1,
                          w.vocabulary, w.bounds, 0, [])
    # none, a truncated spec (it would crash the partition that answers it), a field missing, whole
    specs = [None, spec[:40], json.dumps({k: v for k, v in json.loads(spec).items() if k != "program"}), spec]
    cmds = Commands([0, 1, 2, 3], [5, 6, 7, 8], [OP_QUERY] * 4, _id_only(0).take(np.zeros(4, np.int64)), [0] * 4,
                    np.array(specs, object))
    _, _, kept, dead = screen(w.messages.slice(0, 10), np.arange(10), cmds, w.bounds)
    assert kept.cseq.tolist() == [3]
    assert [(d["position"], d["code"]) for d in dead] == [(0, "E138"), (1, "E138"), (2, "E138")]
    assert "does not parse" in dead[1]["error"] and "program" in dead[2]["error"]
    with pytest.raises(InputError) as err:
        _command_row({"op": "query", "kind": "range", "rect": [0, 0, 1, 1]}, w.vocabulary, w.bounds, 0)
    assert err.value.code == "E138" and "staged" in str(err.value)


@pytest.mark.spark_lane  # a stop and a resume: the Spark lane (the default run resumes in test_spark_jobs.py)
def test_spark_queries_stopped_and_resumed_run_on_a_term_method(spark, tmp_path):
    """``keyword`` on the real job (partials merged from every partition's answer files): a run
    stopped after two batches writes the answers of the queries it reached, the resumed run
    writes them all, equal to ``simulate --answers-out``."""
    from skype.spark.job import run_options
    from skype.run import main

    files = {name: tmp_path / f"{name}.jsonl" for name in ("m", "s", "e")}
    assert main(["generate", "--dataset", "tweets", "--num-subs", "50", "--num-messages", "800", "--seed", "4",
                 "--sub-kinds", "topk,range,knn", "--query-kinds", "topk,range,knn", "--k", "5", "--queries", "20",
                 "--messages-out", str(files["m"]), "--subscriptions-out", str(files["s"]),
                 "--events-out", str(files["e"])]) == 0
    common = ["--subscriptions", str(files["s"]), "--events", str(files["e"]), "--window", "300"]
    assert main(["simulate", *common, "--answers-out", str(tmp_path / "sim.jsonl")]) == 0
    want = [json.loads(line) for line in (tmp_path / "sim.jsonl").read_text().splitlines()]
    run = ["distributed", *common, "--method", "keyword", "--partitions", "3", "--batch-size", "200",
           "--checkpoint", str(tmp_path / "run"), "--answers-out", str(tmp_path / "dist.jsonl")]
    run_options(vars(build_parser().parse_args(run + ["--stop-after-batches", "2"])), spark)
    got = [json.loads(line) for line in (tmp_path / "dist.jsonl").read_text().splitlines()]
    reached = [a for a in want if a["after"] <= 400]
    assert reached and len(reached) < len(want) and got == reached, _first_difference(got, reached)
    run_options(vars(build_parser().parse_args(run)), spark)
    got = [json.loads(line) for line in (tmp_path / "dist.jsonl").read_text().splitlines()]
    assert len(want) == 20 and got == want, _first_difference(got, want)


def test_spark_queries_late_query_names_the_users_qid():
    """A query that reaches a partition after the batch holding its position (an open stream's
    late write) is E138 naming the user's ``qid``, not the internal ordinal."""
    from skype.dskype.codec import OP_QUERY, Commands
    from skype.dskype.snapshots import due_query
    from skype.dskype.staging import _id_only

    spec = json.dumps({"query": 3, "qid": "late-one", "kind": "range"})
    queries = Commands([7], [50], [OP_QUERY], _id_only(3), [0], np.array([spec], object))
    with pytest.raises(InputError) as err:
        due_query(queries, 0, 99, 2)
    assert err.value.code == "E138" and "'late-one'" in str(err.value) and "partition 2" in str(err.value)


@given(st.lists(st.integers(0, 6), min_size=1, max_size=40), st.integers(1, 6), st.data())
@hypothesis_settings(max_examples=200, deadline=None)
def test_spark_queries_first_fresh_message_equals_the_brute_force(steps, chunks, data):
    """``last`` on a count window: the first fresh message, searched chunk by chunk, is the first
    one ``reference_queries.fresh`` accepts (timestamps with ties, chunks of any size)."""
    from skype.dskype.snapshots import _first_fresh
    from skype.reference_queries import fresh

    t = np.cumsum(np.array(steps, np.float64)) / 4
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(t) - 1), max_size=chunks)))) if len(t) > 1 else []
    times = [c for c in np.split(t, cuts) if len(c)]
    last = data.draw(st.sampled_from([0.25, 0.5, 1.0, 1.1, 3.0, 100.0]))
    now = float(t[-1])
    expected = next((i for i in range(len(t)) if fresh(float(t[i]), now, last)), len(t))
    assert _first_fresh(times, len(t), now, last) == expected
