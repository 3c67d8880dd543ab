"""Table versions travel with the stream (issue 25, deliverable 3), JVM-free.

The version of the ownership tables an adaptive pipeline's batch may use is decided once, when
the source plans the batch, and recorded in its offset; a replayed batch (the same offsets)
carries the same version whatever was written since; the router stamps every partition with it;
a partition without a stamp refuses the batch (E115); a version file is committed once, by the
first attempt, and a duplicate attempt neither tears nor replaces it."""

from __future__ import annotations

import json
import pickle
import threading

import numpy as np
import pytest

pytest.importorskip("pyspark")

from skype.errors import InputError, OperationalError  # noqa: E402
from skype.dskype.files import write_once  # noqa: E402
from skype.dskype.handover import (TableVersion, UnitLocator, VersionLog, newest_version, version_path,  # noqa: E402
                                   write_version)
from skype.dskype.stamps import stamped_tables  # noqa: E402
from skype.dskype.routing import (KIND_TABLES, Router, events_from_arrow, routing_copy,  # noqa: E402
                                  tables_events, tables_from_arrow)

pytestmark = pytest.mark.spark


def _dist(partitions: int = 3):
    from skype.data import make_workload
    from skype.partitioning import build_distribution

    w = make_workload("tweets", num_subs=60, num_messages=300, seed=2)
    return build_distribution("agrid", partitions, w.subscriptions, w.messages, w.vocabulary)


def _locator(partitions: int = 3, shift: int = 0) -> UnitLocator:
    base = UnitLocator.of(_dist(partitions))
    return UnitLocator(base.grid, base.cell_region, base.region_unit0, base.region_cut0, base.cut_keys,
                       ((base.owner + shift) % partitions).astype(np.int32))


def _stream(tmp_path, messages: int = 30, commands: int = 4):
    mdir, cdir = tmp_path / "messages", tmp_path / "commands"
    mdir.mkdir()
    cdir.mkdir()
    with open(mdir / "m-000.jsonl", "w") as fh:
        for i in range(messages):
            fh.write(json.dumps({"id": i, "x": 0.5, "y": 0.5, "t": float(i), "term_ids": [1], "weights": [1.0]}) + "\n")
    with open(cdir / "c-000.jsonl", "w") as fh:
        for i in range(commands):
            fh.write(json.dumps({"op": "sub", "at": 10 * i, "id": i, "x": 0.5, "y": 0.5, "k": 2, "alpha": 0.5,
                                 "term_ids": [1], "weights": [1.0]}) + "\n")
    return str(mdir), str(cdir)


def test_a_version_is_committed_once_and_probed_by_name(tmp_path):
    assert newest_version(tmp_path) == -1
    assert write_version(tmp_path, TableVersion(0, 0, -1, _locator()))
    first = version_path(tmp_path, 0).read_bytes()
    # a duplicate attempt (a re-run decision, a zombie task) keeps the first file
    assert not write_version(tmp_path, TableVersion(0, 0, -1, _locator(shift=1)))
    assert version_path(tmp_path, 0).read_bytes() == first
    write_version(tmp_path, TableVersion(1, 50, 0, _locator(shift=1)))
    assert newest_version(tmp_path) == 1 and newest_version(tmp_path, known=1) == 1
    (tmp_path / "version-000005.pkl").write_bytes(b"")  # a gap: the probe stops at the first missing name
    assert newest_version(tmp_path) == 1
    assert not list(tmp_path.glob(".*.tmp")), "no temporary file is left behind"


def test_racing_attempts_commit_one_whole_file(tmp_path):
    path = tmp_path / "loads-00000003.json"
    blobs = [json.dumps([float(i)] * 2000).encode() for i in range(8)]
    won = []

    def attempt(blob):
        if write_once(path, blob):
            won.append(blob)

    threads = [threading.Thread(target=attempt, args=(b,)) for b in blobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and path.read_bytes() == won[0]
    assert not list(tmp_path.glob(".*.tmp"))


def test_version_log_loads_exactly_the_stamped_versions(tmp_path):
    write_version(tmp_path, TableVersion(0, 0, -1, _locator()))
    write_version(tmp_path, TableVersion(1, 40, 0, _locator(shift=1)))
    write_version(tmp_path, TableVersion(2, 80, 1, _locator(shift=2)))
    log = VersionLog(str(tmp_path))
    assert len(log.upto(1)) == 2 and len(log.tables) == 2, "version 2 is not read for a batch stamped 1"
    with pytest.raises(OperationalError, match="E064"):
        VersionLog(str(tmp_path)).upto(3)


def test_the_offset_records_the_version_and_a_replayed_batch_keeps_it(tmp_path):
    from pyspark.sql.datasource import InputPartition

    from skype.spark.sources import PairedStreamReader, StreamFilesReader

    mdir, cdir = _stream(tmp_path)
    tables = tmp_path / "rebalance"
    write_version(tables, TableVersion(0, 0, -1, _locator()))
    reader = PairedStreamReader(StreamFilesReader(mdir, "messages", None), StreamFilesReader(cdir, "commands", None),
                                10, None, {0: str(tables)})
    start = reader.initialOffset()
    assert start["tables"] == {"0": 0}
    end = reader.latestOffset(start, None)
    assert end["tables"] == {"0": 0} and end["messages"] == 10
    write_version(tables, TableVersion(1, 10, 0, _locator(shift=1)))  # decided after the batch ran

    def versions_read(start, end):
        got = set()
        for part in reader.partitions(start, end):
            for batch in reader.read(InputPartition(part.value)):
                got.update(tables_from_arrow(batch).items())
                assert len(events_from_arrow(batch)[2]) == sum(
                    1 for k in batch.column("kind").to_pylist() if k not in (0, KIND_TABLES))
        return got

    # the replay of the first batch reads the logged offsets: still version 0
    assert versions_read(start, end) == {(0, (0, 0))}
    nxt = reader.latestOffset(end, None)
    # announced by the next batch, in force from the one after: (in force, newest)
    assert nxt["tables"] == {"0": 1} and versions_read(end, nxt) == {(0, (0, 1))}
    assert versions_read(nxt, reader.latestOffset(nxt, None)) == {(0, (1, 1))}
    # no records left to read: the offset does not move, a new version alone makes no batch
    last = reader.latestOffset(reader.latestOffset(nxt, None), None)
    write_version(tables, TableVersion(2, 30, 2, _locator(shift=2)))
    assert reader.latestOffset(last, None) == last
    # an offset logged before versions were recorded (an older run directory): the newest
    legacy = {"messages": 10, "commands": 4}
    assert versions_read({"messages": 0, "commands": 0}, legacy) == {(0, (2, 2))}


def test_every_partition_gets_the_stamp_and_a_batch_without_one_is_refused(tmp_path):
    from skype.dskype.partition import PartitionConfig, PartitionCore, PartitionInput
    from skype.dskype.window import WindowSpec

    dist = _dist(3)
    router = Router(routing_copy(dist), [0, 1, 2], pipeline=1)
    control = tables_events({0: 5, 1: 2})
    assert tables_from_arrow(control) == {0: (5, 5), 1: (2, 2)}
    assert tables_from_arrow(tables_events({0: (4, 5)})) == {0: (4, 5)}
    messages, seq, commands = events_from_arrow(control)
    assert len(messages) == 0 and len(commands) == 0, "control events are neither messages nor commands"
    parts = router.route(messages, seq, commands, 2)
    assert sorted(parts) == [0, 1, 2] and {stamped_tables((p.summary,)) for p in parts.values()} == {(2, 2)}
    assert router.route(messages, seq, commands) == {}

    write_version(tmp_path, TableVersion(0, 0, -1, UnitLocator.of(dist)))
    config = PartitionConfig(partition=0, num_buckets=2, window=WindowSpec("count", 100), bounds=(0, 0, 1, 1),
                             rebalance_dir=str(tmp_path))
    core = PartitionCore(config)
    empty = PartitionInput(messages, seq, commands, -1, -np.inf)
    with pytest.raises(InputError, match="E115"):
        core.apply(empty)
    out = core.apply(PartitionInput(messages, seq, commands, -1, -np.inf, ("tables:0",)))
    assert out.metrics["hosted"] == 0
    assert pickle.loads(version_path(tmp_path, 0).read_bytes()).version == 0


def test_commands_go_to_their_owner_and_a_foreign_command_or_a_missing_hand_over_is_refused(tmp_path):
    """Under the version in force, a subscribe reaches its record's owner only (an id-only
    unsubscribe every partition); a partition given a record another owns refuses it (E117); a
    switch whose hand-over file is missing stops with E116 (the new owner reads files by name)."""
    from skype.data import make_workload
    from skype.dskype.codec import OP_SUB, OP_UNSUB, Commands
    from skype.dskype.partition import PartitionConfig, PartitionCore, PartitionInput
    from skype.dskype.staging import _id_only
    from skype.dskype.window import WindowSpec

    dist = _dist(3)
    write_version(tmp_path, TableVersion(0, 0, -1, UnitLocator.of(dist)))
    write_version(tmp_path, TableVersion(1, 0, 0, _locator(shift=1)))
    subs = make_workload("tweets", num_subs=30, num_messages=10, seed=3).subscriptions
    n = len(subs)
    cmds = Commands(np.arange(n), np.full(n, 5), np.full(n, OP_SUB, np.int8), subs, np.zeros(n, np.int32))
    blind = Commands([n], [5], [OP_UNSUB], _id_only(7), [0])
    router = Router(routing_copy(dist), [0, 1, 2], tables_dir=str(tmp_path))
    owners = UnitLocator.of(dist).home_partitions(subs)
    for version, shift in ((0, 0), (1, 1)):
        parts = router.route(*events_from_arrow(tables_events({0: version}))[:2],
                             Commands.concat([cmds, blind]), (version, version))
        for p in range(3):
            got = Commands.unpack(parts[p].commands)
            placed = sorted(got.subs.ids[got.op == OP_SUB].tolist())
            assert placed == sorted(subs.ids[(owners + shift) % 3 == p].tolist())
            assert got.subs.ids[got.op == OP_UNSUB].tolist() == [7]
    assert len(set(owners.tolist())) > 1
    config = PartitionConfig(partition=0, num_buckets=2, window=WindowSpec("count", 100), bounds=(0, 0, 1, 1),
                             rebalance_dir=str(tmp_path))
    empty = events_from_arrow(tables_events({0: 0}))[:2]
    foreign = cmds.take(np.flatnonzero(owners != 0)[:1])
    with pytest.raises(InputError, match="E117"):
        PartitionCore(config).apply(PartitionInput(*empty, foreign, -1, -np.inf, ("tables:0:0",)))
    core = PartitionCore(config)
    core.apply(PartitionInput(*empty, Commands.empty(), -1, -np.inf, ("tables:0:1",)))  # announces version 1
    with pytest.raises(OperationalError, match="E116"):  # partitions 1 and 2 never wrote theirs
        core.apply(PartitionInput(*empty, Commands.empty(), -1, -np.inf, ("tables:1:1",)))
