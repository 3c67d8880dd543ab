"""The fold of ``serve --engine spark`` (:mod:`skype.service.spark_fold`), against the runtime's own
fold (:func:`skype.dskype.results.fold_events`, in the order of ``folded_results``), on random
batches of event rows (Hypothesis; no Spark needed): the same top-k after every batch; the
events, folded by a follower, give those top-k; seqs 1, 2, ... without a gap; a batch folded
twice (a restart, a re-run batch) changes nothing.  And the staging of the writes across a restart."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")

from hypothesis import given, settings, strategies as st  # noqa: E402

from skype.dskype.reports import events_schema  # noqa: E402
from skype.dskype.results import fold_events  # noqa: E402
from skype.service.spark_fold import BatchRows, FoldedResults  # noqa: E402

entry = st.fixed_dictionaries({"id": st.integers(0, 12), "score": st.sampled_from([0.25, 0.5, 0.75, 1.0]),
                               "seq": st.integers(0, 50)})
row = st.fixed_dictionaries({
    "upto": st.just(0), "sub": st.integers(1, 6), "entered": st.lists(entry, max_size=4),
    "left": st.lists(st.integers(0, 12), max_size=3), "created": st.booleans(), "removed": st.booleans()})


def table(rows: list[dict]):
    return pa.Table.from_pylist(rows, schema=events_schema())


def follow(state: dict, block) -> None:
    """A follower's fold of one block of events (the event objects of the streams)."""
    for i in range(len(block)):
        ev = block.event(i)
        cur = state.setdefault(ev["sub"], {})
        for m in ev["left"]:
            cur.pop(m, None)
        for e in ev["entered"]:
            cur[e["id"]] = e["score"]
        if ev.get("removed"):
            del state[ev["sub"]]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(row, max_size=8), min_size=1, max_size=6), st.booleans())
def test_fold_equals_the_runtime_fold_and_its_events_fold_to_it(batches, split):
    fold, want, followed = FoldedResults(), {}, {}
    seqs: list[int] = []
    for batch, rows in enumerate(batches):
        # the parts of one batch: one file, or two (as two partitions write)
        parts = [table(rows[: len(rows) // 2]), table(rows[len(rows) // 2:])] if split else [table(rows)]
        block = fold.apply(batch, BatchRows(parts), position=10 * batch)
        fold_events(sorted(rows, key=lambda r: 0 if r["removed"] and not r["created"] else 1), want)
        assert fold.entries == want
        if block is not None:
            seqs += list(range(block.seq0, block.seq0 + len(block)))
            assert block.position == 10 * batch
            follow(followed, block)
        assert followed == {sid: {m: sc for m, (sc, _) in e.items()} for sid, e in want.items()}
        assert fold.apply(batch, BatchRows(parts), position=10 * batch) is None  # folded once only
        assert fold.entries == want
    assert seqs == list(range(1, len(seqs) + 1)) and fold.seq == len(seqs)


def test_staging_after_a_restart_stages_every_record_once_in_log_order(tmp_path):
    """Records 0-4 staged, record 5 pending at a kill; the restarted writer replays 0-5 (as the
    log's replay does) and stages only what no file holds, under names that sort after the
    files already there, so the stream reads every message and command once, in log order."""
    import pyarrow.parquet as pq

    from skype.service.spark_staging import StreamWriter
    from skype.workload import messages_batch, subscriptions_batch

    def msg(i: int):
        return messages_batch([(i, 0.0, 0.0, float(i), [1], [1.0])])

    sub = subscriptions_batch([(7, 0.0, 0.0, 1, 0.5, [1], [1.0])])

    def replay(w: StreamWriter, upto: int) -> None:
        for i in range(upto):
            if i == 5:
                w.command("sub", 5, sub)
            else:
                w.message(msg(i))
            w.written()

    first = StreamWriter(tmp_path)
    replay(first, 5)
    first.flush()
    replay_from = first.index
    first.command("sub", 5, sub)
    first.written()  # pending when the service is killed: never flushed
    assert replay_from == 5
    again = StreamWriter(tmp_path)
    replay(again, 6)
    again.message(msg(6))
    again.written()
    again.flush()
    names = {d: sorted(p.name for p in (tmp_path / "in" / d).glob("*.parquet")) for d in ("messages", "commands")}
    assert names["messages"] == ["part-000000000000-000000000004.parquet", "part-000000000005-000000000006.parquet"]
    assert names["commands"] == ["part-000000000005-000000000006.parquet"]
    ids = [i for n in names["messages"] for i in pq.read_table(tmp_path / "in" / "messages" / n).column("id").to_pylist()]
    assert ids == [0, 1, 2, 3, 4, 6]  # record 5 is the subscription
    assert pq.read_table(tmp_path / "in" / "commands" / names["commands"][0]).column("id").to_pylist() == [7]
