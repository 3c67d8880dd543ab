"""The Spark job's logic without a JVM: blobs, keys, command positions, routing, and the whole
pipeline (stream files -> routing -> both stateful processors under ``TwsTester``) checked against
the centralized engine after every micro-batch, for every method and both window kinds, with
cache losses and uncommitted batches injected."""

from __future__ import annotations

import os
import time

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyspark")

from spark_fixtures import METHODS, LocalPipeline, centralized_by_batch, events_workload, first_difference  # noqa: E402

from skype.simulate import load_inputs  # noqa: E402
from skype.run import build_parser  # noqa: E402
from skype.dskype import codec  # noqa: E402
from skype.dskype.codec import OP_DROP, OP_SUB, OP_UNSUB, Commands  # noqa: E402
from skype.dskype.keys import grouping_keys, spark_partition_of  # noqa: E402
from skype.dskype.hosted import plan_commands  # noqa: E402

pytestmark = pytest.mark.spark

BATCH = 400


def _inputs(events_path, window_args):
    args = build_parser().parse_args(["distributed", "--events", str(events_path), *window_args])
    return args, load_inputs(vars(args))


def _settings(method, window_args, inputs, partitions=4, **extra):
    from skype.dskype.plan import RunSettings

    args = build_parser().parse_args(["distributed", "--method", method, "--partitions", str(partitions),
                                      "--batch-size", str(extra.pop("batch_size", BATCH)), *window_args])
    return RunSettings.from_options({**vars(args), **extra}, inputs.bounds)


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return events_workload(tmp_path_factory.mktemp("spark-logic") / "events.jsonl")


def _time_window_args(inputs_count) -> list[str]:
    t = inputs_count.messages().t
    return ["--window-seconds", str(float(t[300] - t[0]))]


def test_spark_codec_round_trips_messages_and_commands(tweets_small):
    batch = tweets_small.messages.slice(0, 50)
    seq = np.arange(100, 150)
    back, back_seq = codec.unpack_messages(codec.pack_messages(batch, seq))
    assert back.ids.tolist() == batch.ids.tolist() and back_seq.tolist() == seq.tolist()
    assert back.terms.weights.tobytes() == batch.terms.weights.tobytes()
    subs = tweets_small.subscriptions.slice(0, 5)
    cmds = Commands([4, 2, 3, 0, 1], [0, -1, 7, 7, 3], [OP_SUB, OP_UNSUB, OP_SUB, OP_SUB, OP_SUB], subs, [1, 1, 2, 1, 3])
    back = Commands.unpack(cmds.pack())
    assert back.cseq.tolist() == [4, 2, 3, 0, 1] and back.subs.terms.ids.tolist() == subs.terms.ids.tolist()
    ordered = Commands.concat([back, back])
    assert ordered.cseq.tolist() == [0, 1, 2, 3, 4]  # ordered by cseq, each once
    drops = cmds.drops()
    assert (drops.op == OP_DROP).all() and drops.subs.ids.tolist() == subs.ids.tolist() and len(drops.subs.terms.ids) == 0
    with pytest.raises(Exception, match="E026"):
        codec.pack(bad=np.array(["x"], dtype=object))


@pytest.mark.parametrize("count,shuffle", [(2, 2), (8, 8), (5, 3)])
def test_spark_keys_spread_partitions_over_spark_partitions(count, shuffle):
    keys = grouping_keys(count, shuffle)
    assert len(set(keys)) == count
    assert [spark_partition_of(k, shuffle) for k in keys] == [i % shuffle for i in range(count)]


def test_spark_plan_commands_apply_in_position_order_and_keep_later_ones(tweets_small):
    subs = tweets_small.subscriptions.slice(0, 4)
    cmds = Commands([0, 1, 2, 3], [12, -1, 3, 40], [OP_SUB] * 4, subs, [1] * 4)
    due, pos, pending = plan_commands(Commands.empty(), cmds, lo=10, hwm_seq=19)
    # at=3 is late (applied at the batch start, 10), at=-1 applies at the start, at=12 inside,
    # at=40 waits for a later batch
    assert due.cseq.tolist() == [1, 2, 0] and pos.tolist() == [10, 10, 12]
    assert pending.cseq.tolist() == [3]
    due, pos, pending = plan_commands(pending, Commands.empty(), lo=20, hwm_seq=39)
    assert due.cseq.tolist() == [3] and pos.tolist() == [40] and len(pending) == 0  # at = h + 1 is due


@pytest.mark.parametrize("method", METHODS)
def test_spark_routing_meets_every_scoring_pair(method, tweets_small):
    """A subscription and a message that scores for it share a partition (exact mode)."""
    from skype.partitioning import build_distribution
    from skype.partitioning.thresholds import scored_pairs
    from skype.dskype.routing import Router

    w = tweets_small
    params = {} if method in ("hashing", "location") else {"summary": False}
    dist = build_distribution(method, 6, w.subscriptions, w.messages.slice(0, 500), w.vocabulary, None, **params)
    router = Router(dist, list(range(6)))
    msgs = w.messages.slice(500, 900)
    n = len(w.subscriptions)
    cmds = Commands(np.arange(n), np.zeros(n, np.int64), np.full(n, OP_SUB, np.int8), w.subscriptions, np.zeros(n))
    parts = router.route(msgs, np.arange(500, 900), cmds)
    assert sorted(parts) == list(range(6))  # every partition gets a tick
    hosts = {p: set(Commands.unpack(r.commands).subs.ids[Commands.unpack(r.commands).op == OP_SUB].tolist())
             for p, r in parts.items()}
    seen = {p: set(codec.unpack_messages(r.messages)[0].ids.tolist()) if r.messages else set()
            for p, r in parts.items()}
    ps, pm, _ = scored_pairs(w.subscriptions, msgs, w.bounds.max_dist)
    for s_row, m_row in zip(ps.tolist(), pm.tolist()):
        sid, mid = int(w.subscriptions.ids[s_row]), int(msgs.ids[m_row])
        assert any(sid in hosts[p] and mid in seen[p] for p in parts), (sid, mid)
    # a subscribe reaches only its placement: the rows sent are the placements, never n x P
    placed = dist.route_subscriptions(w.subscriptions, None)
    sent = [Commands.unpack(r.commands) if r.commands else Commands.empty() for r in parts.values()]
    assert sum(len(c) for c in sent) == len(placed.pairs()[0])
    for p, r in parts.items():
        assert set(sent[p].op.tolist()) <= {OP_SUB} and r.hwm_seq == 899
        assert sorted(sent[p].subs.ids.tolist()) == sorted(w.subscriptions.ids[placed.pairs()[0][placed.pairs()[1] == p]].tolist())
        nrep = dict(zip(w.subscriptions.ids.tolist(), placed.counts().tolist()))
        assert sent[p].nrep.tolist() == [nrep[s] for s in sent[p].subs.ids.tolist()]


def test_spark_unsubscribe_reaches_only_the_partitions_holding_it(tweets_small):
    """An unsubscribe carrying its record goes to that record's placement; without a record
    (a producer that does not know it) to every partition."""
    from skype.partitioning import build_distribution
    from skype.dskype.routing import Router

    w = tweets_small
    subs = w.subscriptions.slice(0, 40)
    dist = build_distribution("keyword", 6, w.subscriptions, w.messages.slice(0, 500), w.vocabulary, None,
                              summary=False)
    router = Router(dist, list(range(6)))
    placed = dist.route_subscriptions(subs, None)
    dist.remove_subscriptions(subs.ids)
    n = len(subs)
    cmds = Commands(np.arange(n), np.zeros(n, np.int64), np.full(n, OP_UNSUB, np.int8), subs, np.zeros(n))
    parts = router.route(w.messages.slice(0, 0), np.zeros(0, np.int64), cmds)
    got = {(int(s), p) for p, r in parts.items() for s in Commands.unpack(r.commands).subs.ids.tolist()}
    pr, pp = placed.pairs()
    assert got == {(int(subs.ids[r]), int(p)) for r, p in zip(pr.tolist(), pp.tolist())}
    assert len(got) < n * 6
    from skype.dskype.staging import _id_only

    blind = Commands([0], [0], [OP_UNSUB], _id_only(int(subs.ids[0])), [0])
    parts = router.route(w.messages.slice(0, 0), np.zeros(0, np.int64), blind)
    assert sorted(parts) == list(range(6))


@pytest.mark.parametrize("window_kind", ["count", "time"])
@pytest.mark.parametrize("method", METHODS)
def test_spark_pipeline_exact_after_every_batch(method, window_kind, workload, tmp_path):
    args, inputs = _inputs(workload, ["--window", "500"])
    window_args = ["--window", "500"] if window_kind == "count" else _time_window_args(inputs)
    args, inputs = _inputs(workload, window_args)
    settings = _settings(method, window_args, inputs)
    want = centralized_by_batch(inputs, settings.window.centralized(), BATCH)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    got = []
    while not pipe.done():
        got.append(pipe.step())
    assert len(got) == len(want)
    for b, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{method}/{window_kind} batch {b}: {first_difference(g, w)}"
    assert sum(len(v) for v in want[-1].values()) > 100  # the check is not vacuous


def test_spark_pipeline_runs_every_method_side_by_side(workload, tmp_path):
    """One run, all six methods as pipelines of the same operators: each exact after every batch."""
    window_args = ["--window", "500"]
    args, inputs = _inputs(workload, window_args)
    settings = _settings("hashing", window_args, inputs)
    settings.distribution.methods = METHODS
    want = centralized_by_batch(inputs, settings.window.centralized(), BATCH)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    for b in range(len(want)):
        pipe.step()
        for index, method in enumerate(METHODS):
            got = pipe.results[index]
            assert got == want[b], f"{method} batch {b}: {first_difference(got, want[b])}"
    assert {m["pipeline"] for ms in pipe.metrics for m in ms} == set(range(len(METHODS)))


@pytest.mark.parametrize("method", ["keyword", "hashing", "prefix"])
def test_spark_pipeline_rebuilds_after_lost_cache_and_uncommitted_batch(method, workload, tmp_path):
    """Cache loss (every host object dropped) and a task whose state-store commit is lost after
    the host applied its batch: both rebuild from durable state, and results stay exact."""
    from skype.spark.hosts import InProcessHosts

    window_args = ["--window", "500"]
    args, inputs = _inputs(workload, window_args)
    settings = _settings(method, window_args, inputs)
    want = centralized_by_batch(inputs, settings.window.centralized(), BATCH)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    retried = []

    def lose_commit(key, rows):
        if pipe.batch == 3 and not retried:
            saved = pipe.snapshot_state(key)
            pipe.partitions.test(key, rows)  # the host applies the batch ...
            pipe.restore_state(key, saved)  # ... but the state store never commits it
            retried.append(key)

    for b in range(len(want)):
        if b == 2:
            InProcessHosts.clear()
        got = pipe.step(before_partition=lose_commit)
        assert got == want[b], f"batch {b}: {first_difference(got, want[b])}"
    hits = [(m["stage"], m["hit"]) for ms in pipe.metrics for m in ms if m["stage"] == "partition"]
    misses_after_start = [h for h in hits[settings.distribution.partitions:] if not h[1]]
    # batch 2 rebuilds every partition, batch 3 the retried one
    assert len(misses_after_start) == settings.distribution.partitions + 1


def test_spark_state_written_per_batch_does_not_grow_with_subscriptions(tmp_path):
    """Durable bytes per steady batch stay flat when the subscriptions grow x10."""
    from skype.workload import Inputs
    from skype.data import make_workload

    written = {}
    for num_subs in (300, 3000):
        w = make_workload("tweets", num_subs=num_subs, num_messages=2400, seed=2, k=5)
        inputs = Inputs(w.vocabulary, w.subscriptions, [("msgs", w.messages)], w.bounds, "tweets")
        settings = _settings("hashing", ["--window", "600"], inputs, partitions=2)
        pipe = LocalPipeline(tmp_path / f"run{num_subs}", settings, inputs)
        while not pipe.done():
            pipe.step()
        per_batch = [sum(m["state_bytes_written"] for m in ms) for ms in pipe.metrics]
        written[num_subs] = float(np.mean(per_batch[1:]))  # batch 0 registers the subscriptions
    assert written[3000] < 1.1 * written[300], written


def test_spark_process_hosts_start_serve_and_stop(tmp_path):
    from skype.spark.hosts import ProcessHosts, new_token

    hosts = ProcessHosts(new_token(), idle_timeout=60, watch_pid=os.getpid())
    reply = hosts.call("merge", 7, ("ping",))
    assert reply[0] == "pong" and reply[1] != os.getpid()
    pid = reply[1]
    assert hosts.call("merge", 7, ("apply", "merge", 7, ("t", None), (0, 0), (1, 5), [], False))[:2] == ("miss", True)
    ok = hosts.call("merge", 7, ("rebuild", "merge", 7, ("t", None), [], (1, 5), [], True))
    assert ok[0] == "ok" and ok[3]["rebuilt"] and ok[2] is not None  # the snapshot asked for
    assert hosts.call("merge", 7, ("apply", "merge", 7, ("t", None), (1, 5), (2, 6), [], False))[0] == "ok"
    assert hosts.call("merge", 7, ("apply", "merge", 7, ("t", None), (1, 5), (2, 7), [], False))[0] == "miss"
    hosts.stop("merge", 7)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"host {pid} did not stop")


def test_spark_fold_events_gives_final_results():
    from skype.model import Match
    from skype.dskype.results import fold_events, ranked

    def event(sub, entered=(), left=(), created=False, removed=False):
        return {"sub": sub, "entered": [{"id": i, "score": sc, "seq": q} for i, sc, q in entered], "left": list(left),
                "created": created, "removed": removed}

    state = fold_events([event(1, [(5, 0.5, 5), (6, 0.5, 6)], created=True), event(2, created=True)])
    fold_events([event(1, [(7, 0.9, 17)], [5]), event(2, removed=True), event(3, [(1, 0.1, 1)], created=True)], state)
    assert {s: ranked(e) for s, e in state.items()} == {
        1: [Match(7, 0.9), Match(6, 0.5)], 3: [Match(1, 0.1)]}  # 2 removed; the 0.5 tie: seq 6 first
    fold_events([event(3, [(2, 0.3, 2)], created=True)], state)  # re-created: starts empty
    assert ranked(state[3]) == [Match(2, 0.3)]


def test_spark_a_message_kept_with_another_score_leaves_and_enters():
    """A subscription replaced by another record within a batch ranks some messages of its old
    list again, with other scores: the event must carry the new score (found by a random stream
    that unsubscribes and subscribes one id at the same position)."""
    from skype.dskype.merge import diff_lists

    old = (np.array([10, 11, 12]), np.array([0.9, 0.8, 0.7]), np.array([10, 11, 12]))
    new = (np.array([11, 10, 13]), np.array([0.95, 0.9, 0.6]), np.array([11, 10, 13]))
    (ids, scores, _), left = diff_lists(old, new)
    assert ids.tolist() == [11, 13] and scores.tolist() == [0.95, 0.6]
    assert sorted(left.tolist()) == [11, 12]  # 10 kept (same score), 11 left and entered again
    (ids, _, _), left = diff_lists(old, old)
    assert len(ids) == 0 and len(left) == 0


def test_spark_results_the_driver_cannot_see_are_an_error_not_an_empty_file(workload, tmp_path):
    """Executors that reported result events whose files are not in the run directory (it is not
    shared by every node) stop the run with E087 instead of an empty results file."""
    from skype.errors import OperationalError
    from skype.dskype.plan import plan_run
    from skype.dskype.results import check_results_visible
    from skype.dskype.staging import suffix

    _, inputs = _inputs(workload, ["--window", "300"])
    plan = plan_run(tmp_path / "run", _settings("location", ["--window", "300"], inputs), inputs)
    pipe = plan.pipelines[0]
    check_results_visible(plan, pipe, 0)  # nothing reported, nothing to find
    with pytest.raises(OperationalError) as err:
        check_results_visible(plan, pipe, 12)
    assert err.value.code == "E087" and str(plan.run_dir) in str(err.value)
    events = plan.events_dir_of(pipe)
    events.mkdir(parents=True, exist_ok=True)
    (events / f"batch-00000000-part-p00000.{suffix(plan.settings.sink.events_format)}").write_text("")
    plan.metrics_dir.mkdir(parents=True, exist_ok=True)
    (plan.metrics_dir / "batch-00000000.json").write_text("{}")  # the batch completed
    check_results_visible(plan, pipe, 12)


def test_spark_files_of_a_batch_stopped_midway_are_not_read(workload, tmp_path):
    """A batch stopped or failed mid-way may leave some tasks' event, result and answer files and
    not others; until it runs again (and the driver writes its metrics file) they are not read:
    neither folded into the results nor taken as snapshot answers."""
    import json as json_mod

    from skype.dskype import snapshots
    from skype.dskype.plan import plan_run
    from skype.dskype.reports import EventBuilder, pack_results
    from skype.dskype.results import completed_batch, event_files, folded_results, stage_result_files
    from skype.spark.sink import TaskFiles, write_task_files

    _, inputs = _inputs(workload, ["--window", "300"])
    plan = plan_run(tmp_path / "run", _settings("location", ["--window", "300"], inputs), inputs)
    pipe = plan.pipelines[0]
    files = TaskFiles.of(plan)

    def events(sub, msg):
        b = EventBuilder(40)
        b.add(sub, (np.array([msg]), np.array([0.5]), np.array([msg])), np.zeros(0, np.int64), created=True)
        return b.rows().pack(40)

    write_task_files(files, 0, "p00000", [(0, "events", events(7, 3))])
    final = pack_results([8], [(np.array([4]), np.array([0.5]), np.array([4]))])
    write_task_files(files, 1, "p00000", [(0, "events", events(8, 4)), (0, "results", final)])
    answer = json_mod.dumps({"n": 0, "p": 0, "answer": [3], "seq": [3]}).encode()
    write_task_files(files, 1, "p00001", [(0, "answers", answer)])
    plan.metrics_dir.mkdir(parents=True, exist_ok=True)
    (plan.metrics_dir / "batch-00000000.json").write_text("{}")
    assert completed_batch(plan) == 0
    assert [p.name.split("-part-")[0] for p in event_files(plan, pipe)] == ["batch-00000000"]
    assert [sid for sid, _ in folded_results(plan, pipe)] == [7] and stage_result_files(plan, pipe) == []
    assert snapshots.read_partials(plan.answers_dir_of(pipe), completed_batch(plan)) == {}
    (plan.metrics_dir / "batch-00000001.json").write_text("{}")  # its re-run completed
    assert [sid for sid, _ in folded_results(plan, pipe)] == [7, 8]
    assert list(snapshots.read_partials(plan.answers_dir_of(pipe), completed_batch(plan))) == [0]
    assert [p.name for p in stage_result_files(plan, pipe)] == ["batch-00000001-part-p00000.jsonl"]


@pytest.mark.parametrize("name", ["skype.dskype.codec", "skype.dskype.keys", "skype.dskype.merge", "skype.dskype.reports",
                                  "skype.dskype.partition", "skype.dskype.routing", "skype.dskype.durable",
                                  "skype.dskype.staging", "skype.spark.hosts"])
def test_spark_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_spark_host_evicts_objects_of_keys_that_moved():
    """An object without requests for a while is forgotten (its key moved elsewhere), and a
    stale stamp is freed at the miss, before the rebuild arrives."""
    from skype.spark.hosts import HostedObjects

    objects = HostedObjects()
    assert objects.handle(("rebuild", "merge", 1, ("t", None), [], (1, 5), [], False))[0] == "ok"
    assert objects.handle(("rebuild", "merge", 2, ("t", None), [], (1, 6), [], False))[0] == "ok"
    objects.used[("merge", 1)] -= 1000.0
    assert objects.evict_idle(500.0) == [("merge", 1)]
    assert sorted(objects.objects) == [("merge", 2)]
    assert objects.handle(("apply", "merge", 2, ("t", None), (9, 9), (10, 1), [], False)) == ("miss", False)
    assert ("merge", 2) not in objects.objects


def test_spark_window_share_expires_and_finds_by_chunk():
    from skype.dskype.window import WindowShare, WindowSpec

    spec = WindowSpec("count", 5)
    w = WindowShare()
    w.append(np.array([7, 3, 9]), np.array([0, 1, 2]), np.array([0.0, 1.0, 2.0]))
    w.append(np.array([1, 8]), np.array([3, 4]), np.array([3.0, 4.0]))
    assert w.seq_of(np.array([9, 1, 7])).tolist() == [2, 3, 0]
    w.expire(spec, 5.0)  # live: times > 0
    assert len(w) == 4 and w.seq_of(np.array([3, 8])).tolist() == [1, 4]
    with pytest.raises(Exception, match="E026"):
        w.seq_of(np.array([7]))
    w.expire(spec, 8.0)
    assert len(w) == 1 and w.ids.tolist() == [8]


def test_spark_poison_records_go_to_dead_letters_and_the_batch_goes_on(tweets_small, tmp_path):
    """A record the engine would reject is left out of the routed batch and written, with its
    error code, to the dead-letter output; a re-run batch rewrites the same file."""
    import json

    from skype.partitioning import build_distribution
    from skype.dskype.routing import Router, events_from_arrow, route_arrow
    from skype.spark.readers import to_events
    from skype.dskype.staging import command_table, message_table

    w = tweets_small
    msgs = w.messages.slice(0, 20)
    x = msgs.x.copy()
    x[3] = np.nan
    bad_msgs = type(msgs)(msgs.ids, x, msgs.y, msgs.t, msgs.terms)
    subs = w.subscriptions.slice(0, 6)
    k = subs.k.copy()
    k[2] = 0
    bad_subs = type(subs)(subs.ids, subs.x, subs.y, k, subs.alpha, subs.terms)
    dist = build_distribution("keyword", 3, w.subscriptions, w.messages.slice(0, 200), w.vocabulary, None,
                              summary=False)
    router = Router(dist, [10, 11, 12])
    batches = [to_events(message_table(bad_msgs), "messages", 100),
               to_events(command_table(["sub"] * 6, [0] * 6, bad_subs), "commands", 0)]
    out_dir = tmp_path / "dead"
    for _ in range(2):  # a replayed batch: same files, same lines
        rows = [r for b in route_arrow([router], iter(batches), bounds=tuple(w.bounds.as_tuple()),
                                       dead_letters=str(out_dir)) for r in b.to_pylist()]
    dead = [json.loads(line) for p in sorted(out_dir.iterdir()) for line in p.read_text().splitlines()]
    assert [(d["kind"], d["position"], d["code"]) for d in dead] == [("command", 2, "E003"), ("message", 103, "E001")]
    got_msgs = {int(i) for r in rows if r["messages"] for i in codec.unpack_messages(r["messages"])[0].ids}
    got_subs = {int(i) for r in rows if r["commands"] for i in Commands.unpack(r["commands"]).subs.ids}
    assert got_msgs == set(msgs.ids.tolist()) - {int(msgs.ids[3])}
    assert got_subs == set(subs.ids.tolist()) - {int(subs.ids[2])}
    assert events_from_arrow(batches[0])[0].ids.tolist() == msgs.ids.tolist()


def test_spark_shipped_routers_are_cached_per_shipment(tweets_small):
    """Two runs in one worker never share routers, even when their broadcast objects collide."""
    import pickle

    from skype.partitioning import build_distribution
    from skype.dskype.routing import ShippedRouters

    class FakeBroadcast:
        def __init__(self, value):
            self.value = value

    subs = tweets_small.subscriptions
    a = ShippedRouters(FakeBroadcast(pickle.dumps([build_distribution("hashing", 2, subs)])), [[5, 6]])
    b = ShippedRouters(FakeBroadcast(pickle.dumps([build_distribution("hashing", 3, subs)])), [[7, 8, 9]])
    assert a.routers()[0].keys == [5, 6] and b.routers()[0].keys == [7, 8, 9]
    assert a.routers()[0].keys == [5, 6] and a.routers()[0].num_partitions == 2


def test_spark_results_request_flags_its_batch_and_touches_no_subscription(tweets_small):
    """A results request (``{"op": "results", "at"}``) is routed to every partition, waits for its
    position like any command, flags the batch in which it falls due, and neither removes nor
    replaces a subscription, not even one whose id is 0 (the request's own id field)."""
    from skype.model import MessageBatch
    from skype.partitioning import build_distribution
    from skype.dskype.codec import OP_RESULTS
    from skype.dskype.hosted import Hosted, replay_commands
    from skype.dskype.partition import PartitionConfig, PartitionCore, PartitionInput
    from skype.dskype.routing import Router
    from skype.dskype.window import WindowSpec

    w = tweets_small
    subs = w.subscriptions.slice(0, 3)
    subs = type(subs)(np.array([0, 1, 2]), subs.x, subs.y, subs.k, subs.alpha, subs.terms)
    request = Commands([3], [150], [OP_RESULTS], _no_record(), [0])
    dist = build_distribution("hashing", 3, w.subscriptions, w.messages.slice(0, 200), w.vocabulary, None)
    parts = Router(dist, [0, 1, 2]).route(w.messages.slice(0, 0), np.zeros(0, np.int64), request)
    assert sorted(parts) == [0, 1, 2]

    core = PartitionCore(PartitionConfig(partition=0, num_buckets=1, window=WindowSpec("count", 100.0),
                                         bounds=(w.bounds.minx, w.bounds.miny, w.bounds.maxx, w.bounds.maxy)))
    commands = Commands.concat([Commands([0, 1, 2], [0, 0, 0], [OP_SUB] * 3, subs, [1] * 3), request])
    msgs = w.messages.slice(0, 200)

    def batch(lo, hi, cmds):
        part = msgs.slice(lo, hi)
        return PartitionInput(MessageBatch(part.ids, part.x, part.y, part.t, part.terms),
                              np.arange(lo, hi, dtype=np.int64), cmds, hi - 1, float(part.t[-1]))

    first = core.apply(batch(0, 100, commands))
    assert not first.metrics["results_requested"] and len(core.pending) == 1  # due at 150
    second = core.apply(batch(100, 200, Commands.empty()))
    assert second.metrics["results_requested"] and len(core.pending) == 0
    assert sorted(core.hosted.rows) == [0, 1, 2]
    hosted = Hosted()
    replay_commands(hosted, commands)
    assert sorted(hosted.rows) == [0, 1, 2]


def _no_record():
    from skype.dskype.staging import _id_only

    return _id_only(0)


def test_spark_kafka_sink_needs_its_topic_and_the_stages_results(workload, tmp_path):
    """``--sink kafka`` needs a bootstrap server and a topic (E023); ``--results-out`` with it needs
    the stateful stages' final results, since the driver has no event files to fold (E088)."""
    from skype.errors import InputError
    from skype.dskype.plan import plan_run
    from skype.dskype.results import check_results_visible

    _, inputs = _inputs(workload, ["--window", "300"])
    with pytest.raises(InputError) as err:
        _settings("location", ["--window", "300"], inputs, sink="kafka").__post_init__()
    assert err.value.code == "E023" and "--events-topic" in str(err.value)
    settings = _settings("location", ["--window", "300"], inputs, sink="kafka", kafka_bootstrap="broker:9092",
                         events_topic="skype-events")
    settings.__post_init__()
    plan = plan_run(tmp_path / "run", settings, inputs)
    pipe = plan.pipelines[0]
    with pytest.raises(InputError) as err:
        check_results_visible(plan, pipe, 0)
    assert err.value.code == "E088" and "skype-events" in str(err.value)
    results = plan.results_dir_of(pipe)
    results.mkdir(parents=True, exist_ok=True)
    (results / "batch-00000003-part-p00000.jsonl").write_text("")
    plan.metrics_dir.mkdir(parents=True, exist_ok=True)
    (plan.metrics_dir / "batch-00000003.json").write_text("{}")  # the batch completed
    check_results_visible(plan, pipe, 12)


@pytest.mark.parametrize("method", ["keyword", "prefix", "agrid"])
def test_spark_source_routes_as_the_map_in_arrow_would(workload, tmp_path, method):
    """The stream files' source routing as it reads yields, piece by piece, exactly the rows the
    ``mapInArrow`` makes of the same piece's events (screening and table stamps included)."""
    import pyarrow as pa
    from pyspark.sql.datasource import InputPartition

    from skype.dskype import rebalancing
    from skype.dskype.plan import plan_run
    from skype.dskype.routing import route_arrow, routers_from_file, write_routers_file
    from skype.spark.runtime import rebalance_dir_of, summary_dir_of
    from skype.spark.sources import PairedStreamReader, StreamFilesReader

    _, inputs = _inputs(workload, ["--window", "300"])
    plan = plan_run(tmp_path / "run", _settings(method, ["--window", "300"], inputs), inputs)
    pipes = plan.pipelines
    path, nbytes = write_routers_file(plan.run_dir / "routers", [p.distribution for p in pipes],
                                      [p.partition_keys for p in pipes], [summary_dir_of(plan, p) for p in pipes],
                                      [rebalance_dir_of(plan, p) for p in pipes])
    assert nbytes > 0 and [p.name for p in (plan.run_dir / "routers").iterdir()] == [Path(path).name]
    routing = {"routers": path, "bounds": list(plan.settings.distribution.bounds), "dead_letters": str(tmp_path / "dead")}
    rebalancing.attach(plan, "never", inputs)  # an adaptive pipeline's version 0, as the job writes it
    tables = {p.index: d for p in pipes if (d := rebalance_dir_of(plan, p)) is not None}

    def reader(with_routing):
        lanes = [StreamFilesReader(str(d), kind, None) for d, kind in ((plan.messages_dir, "messages"),
                                                                        (plan.commands_dir, "commands"))]
        return PairedStreamReader(*lanes, max_messages=BATCH, max_commands=None, tables=tables,
                                  routing=routing if with_routing else None)

    routed, plain = reader(True), reader(False)
    start: dict = {}
    rows_seen = 0
    for _ in range(4):
        end = plain.latestOffset(start, None)
        for piece in plain.partitions(start, end):
            got = [b for b in routed.read(InputPartition(piece.value))]
            want = list(route_arrow(routers_from_file(path), plain.read(InputPartition(piece.value)),
                                    bounds=tuple(plan.settings.distribution.bounds)))
            got_rows = pa.Table.from_batches(got).to_pylist() if got else []
            want_rows = pa.Table.from_batches(want).to_pylist() if want else []
            assert got_rows == want_rows
            rows_seen += len(got_rows)
        start = end
    assert rows_seen > 0


def test_spark_checkpoint_manager_default_keeps_a_users_choice():
    """The run's default checkpoint file manager is set only where the user set none."""
    from skype.spark.runtime import DEFAULT_SQL_CONF, configure

    class Conf(dict):
        def set(self, key, value):
            self[key] = value

        def get(self, key, default=None):
            return dict.get(self, key, default)

    class Spark:
        def __init__(self, conf):
            self.conf = Conf(conf)

    class Plan:
        host_slots = 1
        shuffle_partitions = 2

    (key, value), = DEFAULT_SQL_CONF.items()
    spark = Spark({})
    configure(spark, Plan())
    assert spark.conf[key] == value and spark.conf["spark.sql.shuffle.partitions"] == "2"
    mine = Spark({key: "my.Manager"})
    configure(mine, Plan())
    assert mine.conf[key] == "my.Manager"
