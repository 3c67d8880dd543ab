"""The durable log of a partition without Spark (:mod:`skype.dskype.durable`): what is stored reads
back as the entries written since the last snapshot, in order, whatever the piece size; expired
window segments leave the store and the live ones stay."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from skype.dskype import durable
from skype.dskype.durable import Meta, commit_partition_log, commit_segments, join_pieces, log_entry_count
from skype.dskype.window import WindowSpec
from skype.model import MessageBatch, TermMatrix


class DictStore:
    def __init__(self) -> None:
        self.values: dict[int, bytes] = {}

    def put(self, key: int, blob: bytes) -> None:
        assert key not in self.values  # ids are never reused
        self.values[key] = blob

    def remove(self, key: int) -> None:
        del self.values[key]


entry = st.one_of(st.none(), st.binary(min_size=0, max_size=40))
batch = st.tuples(entry, entry, entry, st.booleans(), st.booleans())  # switch, delta, activation, snapshot?, host ok?


@given(st.lists(batch, max_size=12), st.integers(1, 16))
@settings(max_examples=300, deadline=None)
def test_log_reads_back_the_entries_since_the_snapshot_in_order(batches, piece):
    """After every batch the stored pieces join into the previous log plus the batch's entries
    (switch, commands, activation, in that order), or into the batch's snapshot alone; no piece
    is larger than the cap, and none is left behind."""
    durable.VALUE_PIECE_BYTES, saved = piece, durable.VALUE_PIECE_BYTES
    try:
        meta, store, log = Meta(), DictStore(), []
        for n, (switch, delta, activation, with_snapshot, host_ok) in enumerate(batches):
            snap = f"snapshot-{n}".encode()
            given_snapshot = snap if with_snapshot and delta is not None else None
            commit_partition_log(meta, store, delta, given_snapshot, switch, activation,
                                 lambda snap=snap, ok=host_ok: snap if ok else None)
            got = join_pieces(meta.log_ids, store.values)
            appended = log + [e for e in (switch, delta, activation) if e is not None]
            assert got in (appended, [snap]), (got, appended)
            if given_snapshot is not None:
                assert got == [snap]
            if not host_ok and given_snapshot is None:
                assert got == appended
            assert log_entry_count(meta.log_ids) == len(got)
            assert sorted(store.values) == sorted(durable.piece_id(i) for i in meta.log_ids)
            assert all(len(v) <= piece for v in store.values.values())
            log = got
    finally:
        durable.VALUE_PIECE_BYTES = saved


def _messages(times: list[float]) -> MessageBatch:
    n = len(times)
    return MessageBatch(np.arange(n, dtype=np.int64), np.zeros(n), np.zeros(n), np.array(times, np.float64),
                        TermMatrix(np.arange(n + 1), np.ones(n, np.int64), np.ones(n)))


@given(st.lists(st.lists(st.integers(0, 100), min_size=1, max_size=5), max_size=8), st.integers(1, 60))
@settings(max_examples=200, deadline=None)
def test_segments_leave_the_store_once_their_newest_message_expired(batches, size):
    spec = WindowSpec("time", float(size))
    meta, store, clock, seq = Meta(), DictStore(), 0.0, 0
    newest: dict[int, float] = {}
    for times in batches:
        times = sorted(float(clock + t) for t in times)
        clock = times[-1]
        batch, seqs = _messages(times), np.arange(seq, seq + len(times), dtype=np.int64)
        seq += len(times)
        before = set(store.values)
        commit_segments(meta, store, [(b"segment", batch, seqs)], spec, clock)
        newest.update({i: times[-1] for i in set(meta.seg_ids) - before})
        assert sorted(store.values) == sorted(meta.seg_ids)
        assert all(spec.live(np.array([newest[i]]), clock)[0] for i in meta.seg_ids)
        assert all(not spec.live(np.array([t]), clock)[0] for i, t in newest.items() if i not in store.values)
