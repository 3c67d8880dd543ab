"""The service's write-ahead log: append-only segment files of checksummed records.

A record is ``length (u32 LE) | crc32 of the payload (u32 LE) | payload`` (the payload is one
JSON command).  Records are numbered globally from 0; a segment file ``log-<first>.wal`` holds
records ``first, first+1, ...`` until the next segment starts.  Invariants:

* a record is acknowledged only after :meth:`Log.sync` returned (``fsync`` per the policy:
  ``always`` and ``batch`` call ``os.fsync``; ``never`` only hands the bytes to the OS);
* opening the log reads every segment in order and stops at the first record that is short or
  fails its checksum (a torn or corrupt tail): the file is cut at the last whole record and any
  later segment is removed, so the log is always a clean prefix of what was written;
* :meth:`Log.rotate` starts a new segment (at a snapshot); :meth:`Log.drop_before` deletes the
  segments wholly before a record number (those that two snapshots cover).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec

HEADER = struct.Struct("<II")
MAX_RECORD = 1 << 30
FSYNC_POLICIES = ("always", "batch", "never")


def _segments(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for p in directory.glob("log-*.wal"):
        try:
            out.append((int(p.stem[4:]), p))
        except ValueError:
            continue
    return sorted(out)


def encode(obj: Any) -> bytes:
    if "ndjson" in obj:  # a message batch as its body (one string): msgspec escapes it fastest
        payload = msgspec.json.encode(obj)
    else:
        payload = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _read_segment(path: Path) -> tuple[list[bytes], int, bool]:
    """The whole records of a segment, the byte length they cover and whether the file ends
    there (False: a torn or corrupt tail follows)."""
    data = path.read_bytes()
    records, pos = [], 0
    while pos + HEADER.size <= len(data):
        length, crc = HEADER.unpack_from(data, pos)
        end = pos + HEADER.size + length
        if length > MAX_RECORD or end > len(data):
            break
        payload = data[pos + HEADER.size:end]
        if zlib.crc32(payload) != crc:
            break
        records.append(payload)
        pos = end
    return records, pos, pos == len(data)


class Log:
    """Append-only, checksummed, segmented command log (see module docstring)."""

    def __init__(self, directory: str | Path, fsync: str = "batch",
                 on_sync: Callable[[float], None] | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.on_sync = on_sync
        self.truncated_bytes = 0  # bytes cut from a torn tail when the log was opened
        self.next_index = 0
        self.bytes_written = 0
        self._fh: Any = None
        self._dirty = False

    def recover(self, start: int = 0) -> Iterator[tuple[int, Any]]:
        """Yield ``(index, command)`` for every whole record with index >= ``start``; cut a torn
        tail; afterwards the log appends after the last whole record."""
        segments = _segments(self.dir)
        index = segments[0][0] if segments else start
        if segments and index > start:
            raise ValueError(f"log segments start at record {index}, after the snapshot's {start}")
        for n, (first, path) in enumerate(segments):
            if first != index:  # a gap: a lost segment; keep the clean prefix only
                self._remove_from(segments[n:], f"segment {path.name} does not follow record {index}")
                break
            records, good, clean = _read_segment(path)
            for payload in records:
                if index >= start:
                    yield index, json.loads(payload)
                index += 1
            if not clean:
                size = path.stat().st_size
                self.truncated_bytes += size - good
                with open(path, "r+b") as fh:
                    fh.truncate(good)
                    os.fsync(fh.fileno())
                print(f"skype serve: log {path.name}: torn or corrupt tail, cut {size - good} bytes after "
                      f"record {index - 1}", file=sys.stderr)
                self._remove_from(segments[n + 1:], "it follows a corrupt record")
                break
        self.next_index = max(index, start)
        self._open_tail()

    def _remove_from(self, segments: list[tuple[int, Path]], why: str) -> None:
        for _, path in segments:
            self.truncated_bytes += path.stat().st_size
            print(f"skype serve: log {path.name} removed: {why}", file=sys.stderr)
            path.unlink()

    def _open_tail(self) -> None:
        segments = _segments(self.dir)
        if segments:
            path = segments[-1][1]
        else:
            path = self.dir / f"log-{self.next_index:016d}.wal"
        self._fh = open(path, "ab", buffering=0)
        fsync_path(self.dir)

    def append(self, command: Any) -> int:
        """Write one command (not yet durable: call :meth:`sync`); returns its index."""
        data = encode(command)
        at = self._fh.tell()
        try:
            view = memoryview(data)
            while view:  # an unbuffered write may be short
                view = view[self._fh.write(view):]
        except OSError:
            self._fh.truncate(at)  # no torn record before the next one (raises if it cannot)
            self._fh.seek(at)
            raise
        self.bytes_written += len(data)
        self._dirty = True
        index = self.next_index
        self.next_index += 1
        return index

    def sync(self) -> None:
        """Make every appended record durable per the fsync policy."""
        if not self._dirty:
            return
        self._dirty = False
        if self.fsync == "never":
            return
        t0 = time.perf_counter()
        os.fsync(self._fh.fileno())
        if self.on_sync is not None:
            self.on_sync(time.perf_counter() - t0)

    def rotate(self) -> None:
        """Start a new segment at the next record (after a snapshot)."""
        self.sync()
        self._fh.close()
        path = self.dir / f"log-{self.next_index:016d}.wal"
        self._fh = open(path, "ab", buffering=0)
        fsync_path(self.dir)

    def drop_before(self, index: int) -> None:
        """Delete the segments whose records all precede ``index``."""
        segments = _segments(self.dir)
        for (first, path), (nxt, _) in zip(segments, segments[1:]):
            if nxt <= index:
                path.unlink()

    def size(self) -> int:
        return sum(p.stat().st_size for _, p in _segments(self.dir))

    def close(self) -> None:
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None


def fsync_path(path: Path) -> None:
    """Make a file's data, or a folder's entries (a rename, a new file), durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
