"""Snapshot queries of ``serve --engine spark`` (:mod:`skype.service.spark_queries`) without Spark.

Staging: a query's command file sorts between the files of the log records before it and after
it, whatever the mix of messages and commands, and a restarted writer still finds what each
directory holds; its ``at`` is the position and its clock the window's newest message.  Waiting:
a query is answered from the batch that holds it, once every partial it needs is there (one for a
whole-window method, one per partition else), merged as ``distributed --answers-out`` merges;
other batches and other queries' lines do not answer it; a wait past the bound is E139 and
forgets the query.  Refusals: ``terms`` (E138) and ``prefix`` with keyword summaries (E135).
The answers themselves, against the single-process service, are ``tests/test_service_spark.py``'s.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from skype.dskype.snapshots import write_part  # noqa: E402
from skype.errors import InputError, OperationalError  # noqa: E402
from skype.model import DEFAULT_BOUNDS  # noqa: E402
from skype.service.spark_backend import StreamEngine  # noqa: E402
from skype.service.spark_staging import StreamWriter, _staged_upto  # noqa: E402
from skype.service.spark_fold import FoldedResults  # noqa: E402
from skype.service.spark_queries import LiveQueries, PendingAnswer, staged_queries  # noqa: E402
from skype.text import Vocabulary  # noqa: E402
from skype.workload import messages_batch, subscriptions_batch  # noqa: E402


class FakeState:
    """What :meth:`LiveQueries.stage` reads of the service's state, over a real :class:`StreamEngine`."""

    def __init__(self, writer: StreamWriter, window: int) -> None:
        self.vocabulary = Vocabulary()
        self.engine = StreamEngine(writer, FoldedResults(), self.vocabulary, DEFAULT_BOUNDS, window)
        self.position = 0

    def _rollback_vocabulary(self, mark: int) -> None:
        self.vocabulary.forget_from(mark)


def queries_of(tmp_path: Path, method: str = "location", partitions: int = 2, timeout_s: float = 5.0) -> LiveQueries:
    return LiveQueries(tmp_path, method, partitions, DEFAULT_BOUNDS, 50, timeout_s)


@pytest.mark.parametrize("seed", range(6))
def test_a_query_file_sorts_at_its_position_in_the_log(tmp_path, seed):
    """Random writes (messages, subscriptions) and queries, flushed at random: reading both
    directories in name order, every query comes after the commands and messages of the records
    before it and before those after it; its ``at`` is the messages before it."""
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    writer = StreamWriter(tmp_path)
    state = FakeState(writer, window=30)
    live = queries_of(tmp_path)
    order: list[tuple[str, int]] = []  # what the log holds, with the queries where they were asked
    t = 0.0
    for record in range(40):
        if rng.random() < 0.3:
            ask = {"kind": "range", "rect": [-1, -1, 1, 1], "qid": record}
            pending = live.stage(state, ask, writer)
            if state.position == 0:
                assert pending == {"qid": record, "after": 0, "kind": "range", "answer": []}
            else:
                assert isinstance(pending, PendingAnswer)
                order.append(("query", state.position))
        if rng.random() < 0.6:
            n = rng.randint(1, 4)
            ids = list(range(state.position, state.position + n))
            t += rng.choice([0.0, 0.5, 2.0])
            state.engine.publish_batch(messages_batch([(i, 0.0, 0.0, t, [1], [1.0]) for i in ids]))
            state.position += n
            order += [("msg", i) for i in ids]
        else:
            state.engine.subscribe_batch(subscriptions_batch([(1000 + record, 0.0, 0.0, 1, 0.5, [1], [1.0])]))
            order.append(("sub", 1000 + record))
        writer.written()
        if rng.random() < 0.3:
            writer.flush()
    writer.flush()
    streams = {}
    for lane in ("messages", "commands"):
        names = sorted(p.name for p in (tmp_path / "in" / lane).glob("*.parquet"))
        streams[lane] = [(name, pq.read_table(tmp_path / "in" / lane / name).to_pylist()) for name in names]
    msgs = [row["id"] for _, rows in streams["messages"] for row in rows]
    assert msgs == [i for op, i in order if op == "msg"]  # the message stream, in log order
    seen = 0  # commands in name order: each at the messages before it in the log
    commands = [(row["op"], row["at"], row["id"]) for _, rows in streams["commands"] for row in rows]
    want = []
    for op, value in order:
        if op == "msg":
            seen += 1
        elif op == "sub":
            want.append(("sub", seen, value))
        else:
            assert value == seen
            want.append(("query", seen, None))
    assert [(op, at) for op, at, _ in commands] == [(op, at) for op, at, _ in want]
    asked = [i for op, _, i in commands if op == "query"]
    assert asked == list(range(len(asked)))  # ordinals 0, 1, ...
    assert staged_queries(tmp_path / "in" / "commands") == len(asked)
    assert _staged_upto(tmp_path / "in" / "commands") <= 40  # query names parse as their records


def test_a_restarted_writer_finds_the_staged_queries_and_records(tmp_path):
    writer = StreamWriter(tmp_path)
    state = FakeState(writer, window=10)
    live = queries_of(tmp_path)
    state.engine.publish_batch(messages_batch([(1, 0.0, 0.0, 1.0, [1], [1.0])]))
    state.position = 1
    writer.written()
    live.stage(state, {"kind": "knn", "x": 0, "y": 0, "k": 2}, writer)
    live.stage(state, {"kind": "knn", "x": 0, "y": 0, "k": 2}, writer)
    again = StreamWriter(tmp_path)
    assert again.staged == {"messages": 1, "commands": 1}  # record 0 staged (the query files name it)
    assert queries_of(tmp_path).next == 2


def test_the_query_clock_is_the_window_newest_message_and_last_counts_from_it(tmp_path):
    writer = StreamWriter(tmp_path)
    state = FakeState(writer, window=4)
    live = queries_of(tmp_path)
    for i, t in enumerate([1.0, 2.0, 2.0, 5.0, 9.0, 9.5]):  # the window keeps the last 4
        state.engine.publish_batch(messages_batch([(i, 0.0, 0.0, t, [1], [1.0])]))
        state.position += 1
        writer.written()
    live.stage(state, {"kind": "range", "rect": [-1, -1, 1, 1], "last": 4.5}, writer)
    import pyarrow.parquet as pq

    path = next((tmp_path / "in" / "commands").glob("*.q*.parquet"))
    row = pq.read_table(path).to_pylist()[0]
    spec = json.loads(row["spec"])
    assert (row["op"], row["at"], row["id"]) == ("query", 6, 0)
    assert spec["now_t"] == 9.5 and spec["from_seq"] == 4  # 9.5 - 5.0 is not < 4.5: message 4 (t=9.0) on
    assert [list(c) for c in state.engine.window_times()] == [[2.0], [5.0], [9.0], [9.5]]
    assert len(state.vocabulary) == 0  # nothing the query added stays


def answer_line(n: int, p: int, ids: list[int], scores: list[float], seqs: list[int]) -> str:
    return json.dumps({"n": n, "p": p, "answer": [{"id": i, "score": s} for i, s in zip(ids, scores)], "seq": seqs})


def staged(live: LiveQueries, state: FakeState, writer: StreamWriter, rec: dict) -> PendingAnswer:
    pending = live.stage(state, rec, writer)
    assert isinstance(pending, PendingAnswer)
    return pending


def one_message(state: FakeState, writer: StreamWriter) -> None:
    state.engine.publish_batch(messages_batch([(state.position, 0.0, 0.0, float(state.position), [1], [1.0])]))
    state.position += 1
    writer.written()


@pytest.mark.parametrize("method,need", [("location", 1), ("prefix", 3)])
def test_a_query_is_answered_from_its_batch_once_every_partial_is_there(tmp_path, method, need):
    writer = StreamWriter(tmp_path)
    state = FakeState(writer, window=10)
    live = LiveQueries(tmp_path, method, 3, DEFAULT_BOUNDS, 10, 5.0)
    live.summarised = False  # prefix with --summaries off (the summaries' refusal: the next test)
    one_message(state, writer)
    first = staged(live, state, writer, {"qid": 7, "kind": "topk", "x": 0, "y": 0, "k": 2, "alpha": 0.5,
                                         "text": "tea"})
    second = staged(live, state, writer, {"qid": 8, "kind": "range", "rect": [-1, -1, 1, 1], "text": "tea"})
    answers = live.answers_dir
    write_part(answers, 3, "p00000", [answer_line(1, 0, [], [], [])])  # the other query's line
    live.batch_done(3)
    assert not first.waiting.future.done()  # another query's line does not answer it
    if need == 1:  # one partial answers a whole-window method's query
        assert second.waiting.future.result(timeout=0) == {"qid": 8, "after": 1, "kind": "range", "answer": []}
    lines = [answer_line(0, p, [10 + p, 5], [1.0 - p / 10, 0.2], [100 + p, 50]) for p in range(need)]
    write_part(answers, 4, "p00000", lines[:-1])
    live.batch_done(4)
    assert not first.waiting.future.done()
    write_part(answers, 4, "p00001", lines[-1:])
    live.batch_done(4)
    line = first.waiting.future.result(timeout=0)
    want = [{"id": 10, "score": 1.0}, {"id": 11, "score": 0.9}] if need > 1 else [{"id": 10, "score": 1.0},
                                                                                    {"id": 5, "score": 0.2}]
    assert line == {"qid": 7, "after": 1, "kind": "topk", "answer": want}
    assert 0 not in live.waiting and (1 in live.waiting) == (need > 1)


def test_a_wait_past_the_bound_is_e139_and_forgets_the_query(tmp_path):
    writer = StreamWriter(tmp_path)
    state = FakeState(writer, window=10)
    live = queries_of(tmp_path, timeout_s=0.05)
    one_message(state, writer)
    pending = staged(live, state, writer, {"qid": 3, "kind": "knn", "x": 0, "y": 0, "k": 1})

    async def wait():
        return await pending

    with pytest.raises(OperationalError, match="E139") as err:
        asyncio.run(wait())
    assert "query 3, staged at position 1" in err.value.detail
    assert live.waiting == {}
    write_part(live.answers_dir, 0, "p00000", [answer_line(0, 0, [], [], [])])
    live.batch_done(0)  # answered later, unread: nothing breaks


def test_terms_and_summarised_prefix_are_refused_before_staging(tmp_path):
    writer = StreamWriter(tmp_path)
    state = FakeState(writer, window=10)
    one_message(state, writer)
    with pytest.raises(InputError, match="E138"):
        queries_of(tmp_path).stage(state, {"kind": "terms", "rect": [-1, -1, 1, 1], "k": 2}, writer)
    with pytest.raises(InputError, match="E135"):
        LiveQueries(tmp_path, "prefix", 2, DEFAULT_BOUNDS, 10, 5.0).stage(
            state, {"kind": "knn", "x": 0, "y": 0, "k": 1, "text": "tea"}, writer)
    with pytest.raises(InputError, match="E003"):  # checked before the refusals, as the core server checks
        queries_of(tmp_path).stage(state, {"kind": "knn", "x": 0, "y": 0, "k": 0}, writer)
    assert not list((tmp_path / "in" / "commands").glob("*.q*.parquet"))  # nothing staged


def test_a_run_planned_without_the_query_window_refuses_queries(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"settings": {"engine_options": {"kmax": 60}}}))
    writer = StreamWriter(tmp_path)
    state = FakeState(writer, window=10)
    one_message(state, writer)
    with pytest.raises(InputError, match="E138"):
        queries_of(tmp_path).stage(state, {"kind": "knn", "x": 0, "y": 0, "k": 1}, writer)


def test_the_driver_plans_from_the_subscriptions_whatever_the_queries_staged(tmp_path):
    """A query's id is its ordinal: staged before the driver's first start, it must not drop the
    subscription with that id from the planning workload; a resumed run reads no sample."""
    from skype.spark.live_driver import planning_inputs

    writer = StreamWriter(tmp_path)
    state = FakeState(writer, window=10)
    live = queries_of(tmp_path)
    state.engine.subscribe_batch(subscriptions_batch([(sid, 0.0, 0.0, 1, 0.5, [1], [1.0]) for sid in (0, 1, 2)]))
    writer.written()
    one_message(state, writer)
    for _ in range(3):  # ordinals 0, 1, 2: the ids of the subscriptions
        live.stage(state, {"kind": "knn", "x": 0, "y": 0, "k": 1}, writer)
    cfg = {"vocabulary": state.vocabulary.to_dict(), "bounds": list(DEFAULT_BOUNDS.as_tuple())}
    planned = planning_inputs(tmp_path, cfg)
    assert sorted(planned.subscriptions.ids.tolist()) == [0, 1, 2]
    assert sum(len(p) for op, p in planned.steps if op == "msgs") == 1
    resumed = planning_inputs(tmp_path, cfg, sample=False)
    assert len(resumed.subscriptions) == 0 and resumed.steps == []
