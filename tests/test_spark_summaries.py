"""Keyword summaries of ``prefix`` partitions on Spark (``skype.dskype.summaries``): the versioned
tables between partitions and router, the stamps a task reads back, the backfill selection, and
the wake-ups a table announces.  No JVM; the end-to-end checks are in ``test_spark_prefix.py``."""

from __future__ import annotations

import numpy as np

from skype.dskype import summaries
from skype.dskype.activation import Activation, ActivationConfig
from skype.dskype.summaries import ALL, SummaryTables, TermHolders, backfill_rows, keep_live_entries, routed_set


def test_term_holders_count_replicas_per_term():
    h = TermHolders("active")
    h.hold(np.array([5, 7]), +1)
    h.hold(np.array([7, 9]), +1)
    h.hold(np.array([7, 5]), -1)
    assert h.terms().tolist() == [7, 9]
    h.hold(np.array([7, 9]), -1)
    assert h.terms().tolist() == []


def test_term_holders_flag_only_terms_that_gain_a_first_or_lose_a_last_holder():
    """The flag that lets a batch skip recomputing the live set: set exactly when the set of held
    terms changes, whatever the counts do."""
    h = TermHolders("hosted")
    h.hold(np.array([5, 7]), +1)
    assert h.changed
    h.changed = False
    h.hold(np.array([7]), +1)
    h.hold(np.array([7]), -1)
    h.hold(np.array([3]), -1)  # a term nobody held: nothing to drop
    assert not h.changed and h.terms().tolist() == [5, 7]
    assert h.lacking(np.array([3, 5, 9])).tolist() == [3, 9]
    h.hold(np.array([5]), -1)
    assert h.changed and h.terms().tolist() == [7]


def test_router_reads_the_newest_version_at_or_before_the_batch(tmp_path):
    d = str(tmp_path)
    tables = SummaryTables(d, 3)
    stamps, live, full = tables.at(0)
    assert stamps == [ALL] * 3 and full.all() and len(live) == 0  # nothing published: keyword routing
    summaries.publish(d, 0, 10, np.array([1, 4]))
    summaries.publish(d, 0, 20, np.array([1]))
    summaries.publish(d, 2, 15, np.array([8, 9]))
    stamps, live, full = tables.at(15)
    assert stamps[0].startswith("10:") and stamps[1] == ALL and stamps[2].startswith("15:")
    assert live.tolist() == [1, 4, 8, 9] and full.tolist() == [False, True, False]
    stamps, live, _ = tables.at(20)
    assert stamps[0].startswith("20:") and live.tolist() == [1, 8, 9]
    # a task reads back exactly what the router used
    assert routed_set(d, 0, [stamps[0]]).tolist() == [1]
    assert routed_set(d, 1, [ALL]) is None
    assert routed_set(d, 0, ["10:" + summaries.digest(np.array([1, 4])), stamps[0]]).tolist() == [1]


def test_a_version_that_does_not_read_back_as_stamped_counts_as_empty(tmp_path):
    d = str(tmp_path)
    dig = summaries.publish(d, 1, 5, np.array([3, 6]))
    summaries.publish(d, 1, 5, np.array([3]))  # a re-run batch rewrote the version in between
    assert routed_set(d, 1, [f"5:{dig}"]).tolist() == []
    assert routed_set(d, 1, [f"7:{dig}"]).tolist() == []  # gone


def test_old_versions_are_removed_but_the_newest_kept(tmp_path):
    d = str(tmp_path)
    for v in range(10):
        summaries.publish(d, 0, v, np.array([v]))
    assert sorted(summaries._versions(d)[0]) == list(range(10 - summaries.KEEP_VERSIONS, 10))


def test_live_entries_route_only_live_terms_or_full_partitions():
    terms = np.array([1, 2, 3, 4])
    parts = np.array([0, 0, 1, 1])
    keep = keep_live_entries(terms, parts, np.array([2, 3]), np.array([False, False]))
    assert keep.tolist() == [False, True, True, False]
    keep = keep_live_entries(terms, parts, np.array([2]), np.array([False, True]))
    assert keep.tolist() == [False, True, True, True]


def test_backfill_takes_missing_terms_on_each_side_of_the_batch_and_skips_what_is_here():
    seq = np.array([10, 11, 12, 13, 14])
    rows = np.array([0, 0, 1, 2, 3, 4])
    terms = np.array([5, 6, 6, 7, 5, 6])
    # before lo = 12: term 6 is missing; from 12 on: term 5 and 6
    got = backfill_rows(seq, rows, terms, 12, np.array([6]), np.array([5, 6]), np.array([11]))
    assert got.tolist() == [0, 3, 4]  # row 1 (seq 11) is already here; row 2 (term 7) not needed


def test_upcoming_names_the_replicas_due_wakes_without_waking_them():
    act = Activation(ActivationConfig((0, 5, 10), batch_messages=10, window=40), 1)
    rng = np.random.default_rng(3)
    for sid in range(60):
        act.sleep(sid, int(rng.integers(0, 200)))
    for sid in range(0, 60, 7):
        act.forget(sid)
    act.sleep(1, 500)  # slept again later: its first entry is stale
    for h in (40, 90, 150, 400):
        expected = act.upcoming(h)
        assert expected == act.due(h), h


def test_backfill_reads_raw_files_by_position_as_the_ingesting_source_does(tmp_path):
    """``--vocabulary`` runs read raw files: the read-back tokenizes them as the executors do,
    across file boundaries, and keeps the stream's positions."""
    from skype import io
    from skype.data import make_workload
    from skype.run import main
    from skype.spark.backfill import BackfillSource

    w = make_workload("tweets", num_subs=10, num_messages=50, seed=2)
    raw = tmp_path / "messages"
    raw.mkdir()
    objects = list(io.message_objects(w.messages, w.vocabulary))
    io.write_objects(raw / "a.jsonl", objects[:20])
    io.write_objects(raw / "b.jsonl", objects[20:])
    assert main(["vocabulary", "--messages", str(raw / "a.jsonl"), "--out", str(tmp_path / "vocab.json")]) == 0
    source = BackfillSource(str(raw), tuple(w.bounds.as_tuple()), raw=True, vocabulary=str(tmp_path / "vocab.json"),
                            claims=str(tmp_path / "claims"), split=7)
    got, seq = source.read(13, 31)
    assert seq.tolist() == list(range(13, 31))
    assert got.ids.tolist() == w.messages.ids[13:31].tolist()
    assert np.allclose(got.x, w.messages.x[13:31]) and np.allclose(got.t, w.messages.t[13:31])
    assert got.terms.lengths().tolist() == w.messages.terms.lengths()[13:31].tolist()
    again, _ = source.read(0, 50)
    assert np.array_equal(again.take(np.arange(13, 31)).terms.ids, got.terms.ids)  # unseen terms: the same ids
