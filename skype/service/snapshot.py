"""Snapshots of the service state as columnar files (Parquet), written atomically.

A snapshot is a directory ``snap-<log record>/`` (the first log record it does not contain):
``subscriptions.parquet`` (id, record JSON, owner token), ``window.parquet`` (id, t, record
JSON of the messages in the window, oldest first: the bytes of its line in the batch that brought
it, so its own ``t`` may be missing; the column ``t`` is the one; and x, y, term ids and weights
as the engine was given them, which a restore publishes as they are: no text decoded, no term
looked up) and ``meta.json`` (position, event seq,
clock, vocabulary, and the CRC32 of each file).  When the engine can export its state
(:meth:`skype.Engine.export_state`: the top-k subscriptions as registered, with their result
buffers), ``engine.npz`` holds those arrays (numpy's uncompressed format, no pickles) and meta its
version (``engine_state``): a restore imports them instead of registering the subscriptions
again.  That file is checked on its own: when it is missing, fails its checksum or does not load,
the restore says so on stderr and registers the subscriptions from ``subscriptions.parquet`` as
a snapshot without it does (the same state, more slowly).  It is written under a temporary name,
every file fsynced, then renamed into place and the directory fsynced: a snapshot either exists
whole or not at all.  The newest two are kept; :func:`load_newest` returns the newest one whose
files read back and match their checksums, so a damaged snapshot falls back to the one before
(the log keeps the segments that snapshot needs).
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from skype.model import MessageBatch, TermMatrix
from skype.service.wal import fsync_path

KEEP = 2
ENGINE_FILE = "engine.npz"  # the engine's exported state (optional)


def _crc(path: Path) -> int:
    return zlib.crc32(path.read_bytes())


def snapshots(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for p in directory.glob("snap-*"):
        if p.is_dir() and not p.name.endswith(".tmp"):
            try:
                out.append((int(p.name[5:]), p))
            except ValueError:
                continue
    return sorted(out)


def write(directory: Path, log_index: int, meta: dict, subs: list[tuple[int, Any, str]] | Path,
          window: tuple, engine: dict[str, np.ndarray] | None = None) -> Path:
    """Write a snapshot covering the log records before ``log_index``; returns its path.
    ``window`` is (ids, t, record texts) and optionally the engine's batch of those messages.
    ``subs`` may be the ``subscriptions.parquet`` of an earlier snapshot when no subscription
    changed since: it is copied, not encoded again.  ``engine``: the engine's exported state
    (``Engine.export_state``), or None."""
    if not directory.is_dir():  # a new folder: its entry in the parent must be durable too
        directory.mkdir(parents=True)
        fsync_path(directory.parent)
    final = directory / f"snap-{log_index:016d}"
    tmp = directory / f"snap-{log_index:016d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    dumps = json.dumps
    if isinstance(subs, Path):  # a copy, not a link: damage to one snapshot must not reach the other
        shutil.copyfile(subs, tmp / "subscriptions.parquet")
    else:
        sub_table = pa.table({"id": pa.array([s[0] for s in subs], pa.int64()),
                              "record": pa.array([s[1] if isinstance(s[1], str) else dumps(s[1]) for s in subs],
                                                 pa.string()),
                              "token": pa.array([s[2] for s in subs], pa.string())})
        pq.write_table(sub_table, tmp / "subscriptions.parquet")
    ids, ts, texts = window[:3]  # columns (WindowRecords.columns): a record's text may lack its t
    columns = {"id": pa.array(ids, pa.int64()), "t": pa.array(ts, pa.float64()),
               "record": pa.chunked_array(texts, pa.large_binary())}
    batch = window[3] if len(window) > 3 else None  # the engine's batch (WindowRecords.batch), or None
    if batch is not None:
        columns.update(x=pa.array(batch.x, pa.float64()), y=pa.array(batch.y, pa.float64()),
                       term_ids=pa.LargeListArray.from_arrays(pa.array(batch.terms.indptr, pa.int64()),
                                                              pa.array(batch.terms.ids, pa.int64())),
                       term_weights=pa.LargeListArray.from_arrays(pa.array(batch.terms.indptr, pa.int64()),
                                                                  pa.array(batch.terms.weights, pa.float64())))
    win_table = pa.table(columns)
    pq.write_table(win_table, tmp / "window.parquet")
    names = ["subscriptions.parquet", "window.parquet"]
    if engine is not None:
        with open(tmp / ENGINE_FILE, "wb") as f:
            arrays: dict[str, Any] = dict(engine)
            np.savez(f, **arrays)
        names.append(ENGINE_FILE)
        meta = dict(meta, engine_state=int(engine["version"][0]))
    meta = dict(meta, log_index=log_index, crc={name: _crc(tmp / name) for name in names})
    (tmp / "meta.json").write_text(json.dumps(meta))
    for name in (*names, "meta.json"):
        fsync_path(tmp / name)
    fsync_path(tmp)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    fsync_path(directory)
    for _, old in snapshots(directory)[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read(path: Path) -> tuple[dict, tuple[list[int], list[bytes], list[str]], tuple, dict | None]:
    """(meta, (subscription ids, their records' JSON texts as written, owner tokens), (window
    records' JSON texts, their t, the engine's batch of them or None), the engine's state or
    None); raises on damage to the subscriptions, the window or meta.  Damage to the engine's
    state only drops it (said on stderr): the restore then registers the subscriptions.  The
    texts are not parsed here: a restore keeps a subscription's text as it is and decodes the
    bodies in one call."""
    meta = json.loads((path / "meta.json").read_text())
    for name, crc in meta["crc"].items():
        if name != ENGINE_FILE and _crc(path / name) != crc:
            raise ValueError(f"{name} fails its checksum")
    subs = pq.read_table(path / "subscriptions.parquet")
    win = pq.read_table(path / "window.parquet")
    return (meta, (subs.column("id").to_pylist(), subs.column("record").cast(pa.binary()).to_pylist(),
                   subs.column("token").to_pylist()),
            (win.column("record").cast(pa.large_binary()).to_pylist(), win.column("t").to_pylist(),
             _window_batch(win)),
            _engine_state(path, meta))


def _engine_state(path: Path, meta: dict) -> dict[str, np.ndarray] | None:
    """The engine's exported state when the snapshot holds one that reads back whole (its
    checksum, every array); else None, saying why on stderr when it was meant to be there."""
    crc = meta["crc"].get(ENGINE_FILE)
    if crc is None:  # an older snapshot, or an engine that exports nothing
        return None
    why = None
    try:
        raw = (path / ENGINE_FILE).read_bytes()
        if zlib.crc32(raw) != crc:
            why = "it fails its checksum"
        else:
            with np.load(io.BytesIO(raw), allow_pickle=False) as arrays:
                return {name: arrays[name] for name in arrays.files}
    except Exception as err:  # a missing or unreadable file: the same fallback
        why = f"it does not read back ({err})"
    print(f"skype serve: snapshot {path.name}: the engine state {ENGINE_FILE} is dropped: {why}; the "
          f"subscriptions are registered again from subscriptions.parquet", file=sys.stderr)
    return None


def _window_batch(win: pa.Table) -> MessageBatch | None:
    """The window's messages as the engine was given them, when the snapshot holds their columns."""
    if "term_ids" not in win.column_names:  # an older snapshot: the texts only
        return None
    term_ids = win.column("term_ids").combine_chunks()
    weights = win.column("term_weights").combine_chunks()
    indptr = term_ids.offsets.to_numpy() - term_ids.offsets[0].as_py()
    return MessageBatch(win.column("id").to_numpy(), win.column("x").to_numpy(), win.column("y").to_numpy(),
                        win.column("t").to_numpy(),
                        TermMatrix(indptr, term_ids.flatten().to_numpy(), weights.flatten().to_numpy()))


def newest_good(directory: Path) -> tuple[Path, dict] | None:
    """The newest snapshot whose files match their checksums, and its meta (what recovery
    would start from), without reading the tables or changing anything."""
    for _, path in reversed(snapshots(directory)):
        try:
            meta = json.loads((path / "meta.json").read_text())
            if all(_crc(path / name) == crc for name, crc in meta["crc"].items() if name != ENGINE_FILE):
                return path, meta
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def load_newest(directory: Path) -> tuple[Any, ...] | None:
    """The newest snapshot that reads back whole: (meta, subs, window, engine state or None),
    or None.  Removes the
    half-written ``.tmp`` directories a crash left."""
    for tmp in directory.glob("snap-*.tmp"):
        shutil.rmtree(tmp, ignore_errors=True)
    for index, path in reversed(snapshots(directory)):
        try:
            return read(path)
        except Exception as err:  # any damage: fall back to the one before
            print(f"skype serve: snapshot {path.name} is damaged ({err}); trying the one before", file=sys.stderr)
    return None


def oldest_kept(directory: Path) -> int | None:
    """The log record of the oldest snapshot kept (the log must still cover it)."""
    snaps = snapshots(directory)
    return snaps[0][0] if snaps else None
