"""The service's write-ahead log: append-only segment files of checksummed records.

A segment file ``log-<first>.wal`` holds records ``first, first+1, ...`` (records are numbered
globally from 0) until the next segment starts.  Format 2 (written since issue 34): the file
opens with the 8 bytes ``SKYWAL`` ``\\0`` ``\\2``; a record is ``magic (2 bytes: 0xFF 'R') |
length (u32 LE, > 0) | crc32 of magic, length and payload (u32 LE) | payload`` (one JSON command;
0xFF never occurs in UTF-8, so the magic never occurs inside a payload).  Format 1 (older logs,
still read, never appended to) has no file header and records ``length | crc32 of payload |
payload``.  A zero-filled region fails either way: a zero length is never a record.

Invariants:

* a record is acknowledged only after :meth:`Log.sync` returned (``fsync`` per the policy:
  ``always`` and ``batch`` call ``os.fsync``; ``never`` only hands the bytes to the OS); the
  log stays dirty until an ``fsync`` succeeds;
* **what counts as the tail**: damage (a short record, a bad magic, length or checksum, a payload
  that is not a JSON command) in the **last** segment, after which no whole record follows
  anywhere in that file.  Opening the log cuts such a tail at the last whole record (the cut
  bytes, unless all zero, are kept aside in ``<segment>@<offset>.corrupt``).  Any other damage
  in the segments recovery reads (those from the one holding the snapshot's first record on), or
  a missing segment, raises :class:`~skype.errors.InputError` E140 naming the segment file and
  byte offset, having changed nothing: an operator decides with :func:`skype.service.walcheck.check` /
  :func:`~skype.service.walcheck.repair`
  (``python -m skype.run wal check|repair DIR``);
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec

from skype.errors import InputError

SEGMENT_MAGIC = b"SKYWAL\x00\x02"  # format 2; as a format-1 length it is > MAX_RECORD
RECORD_MAGIC = b"\xffR"
HEADER = struct.Struct("<2sII")  # magic, length, crc
V1_HEADER = struct.Struct("<II")  # length, crc32(payload)
MAX_RECORD = 1 << 30
FSYNC_POLICIES = ("always", "batch", "never")


def segments(directory: Path) -> list[tuple[int, Path]]:
    """The log's segment files ``(first record, path)``, in order."""
    out = []
    for p in directory.glob("log-*.wal"):
        try:
            out.append((int(p.stem[4:]), p))
        except ValueError:
            continue
    return sorted(out)


def encode(obj: Any) -> bytes:
    """One format-2 record."""
    if "ndjson" in obj:  # a message batch as its body (one string): msgspec escapes it fastest
        payload = msgspec.json.encode(obj)
    else:
        payload = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    head = RECORD_MAGIC + len(payload).to_bytes(4, "little")
    return head + zlib.crc32(payload, zlib.crc32(head)).to_bytes(4, "little") + payload


def encode_v1(obj: Any) -> bytes:
    """One format-1 record (only to test that old logs are still read)."""
    payload = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    return V1_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _record_at(data: bytes, pos: int, version: int) -> tuple[int, int] | str:
    """The payload span ``(start, end)`` of a whole record at ``pos``, or why there is none."""
    if version == 2:
        if len(data) - pos < HEADER.size:
            return "short record header"
        magic, length, crc = HEADER.unpack_from(data, pos)
        if magic != RECORD_MAGIC:
            return "no record magic (zero-filled or overwritten)" if magic == b"\0\0" else "no record magic"
        start = pos + HEADER.size
    else:
        if len(data) - pos < V1_HEADER.size:
            return "short record header"
        length, crc = V1_HEADER.unpack_from(data, pos)
        start = pos + V1_HEADER.size
    if length == 0 or length > MAX_RECORD:
        return f"invalid record length {length}"
    end = start + length
    if end > len(data):
        return f"record of {length} bytes runs past the end of the file"
    payload = data[start:end]
    got = zlib.crc32(payload, zlib.crc32(data[pos:pos + 6])) if version == 2 else zlib.crc32(payload)
    if got != crc:
        return "checksum mismatch"
    return start, end


def _command(payload: bytes) -> Any:
    """The JSON command of a record's payload, or None when it is not one."""
    try:
        cmd = json.loads(payload)
    except ValueError:
        return None
    return cmd if isinstance(cmd, dict) and "op" in cmd else None


@dataclass
class Segment:
    """One segment file as read: its whole records up to the first damage, and what follows."""

    path: Path
    first: int  # the record number of its first record (from the name)
    version: int  # 1 or 2 (2 for an empty or torn-header file)
    size: int
    commands: list = field(default_factory=list)  # the commands of its whole records, in order
    offsets: list = field(default_factory=list)  # the byte offset of each
    end: int = 0  # after the last whole record: where a cut goes
    damage: str | None = None  # why the bytes at ``end`` are not a whole record
    after: list = field(default_factory=list)  # (offset, end, command) of whole records after the damage

    @property
    def last(self) -> int:
        """One past its last whole record's number."""
        return self.first + len(self.commands)


def read_segment(path: Path, first: int) -> Segment:
    """Read a segment: whole records up to the first damage; after a damage, every later offset
    where a whole record starts (a record after the damage means it is not a tail)."""
    data = path.read_bytes()
    seg = Segment(path, first, 2, len(data))
    if data.startswith(SEGMENT_MAGIC):
        pos = len(SEGMENT_MAGIC)
    elif len(data) < len(SEGMENT_MAGIC) and SEGMENT_MAGIC.startswith(data):
        seg.damage = "torn segment header" if data else None  # empty: a segment just created
        return seg
    elif isinstance(_record_at(data, 0, 1), tuple):
        seg.version, pos = 1, 0
    else:
        seg.damage = "no segment header and no format-1 record at its start"
        seg.after = _records_after(data, 0, 2) or _records_after(data, 0, 1)
        return seg
    seg.end = pos
    while pos < len(data):
        span = _record_at(data, pos, seg.version)
        cmd = _command(data[span[0]:span[1]]) if isinstance(span, tuple) else None
        if cmd is None or isinstance(span, str):
            seg.damage = span if isinstance(span, str) else "the payload is not a JSON command"
            seg.after = _records_after(data, pos, seg.version)
            break
        seg.commands.append(cmd)
        seg.offsets.append(pos)
        pos = seg.end = span[1]
    return seg


def _records_after(data: bytes, pos: int, version: int) -> list[tuple[int, int, Any]]:
    """Whole records starting after ``pos`` (format 2: at a record magic; format 1, which has
    none, at any offset), each taken from the first found on: ``[(offset, end, command)]``."""
    out: list[tuple[int, int, Any]] = []
    at = pos + 1
    while at < len(data):
        hit = None
        nxt = data.find(RECORD_MAGIC, at) if version == 2 else -1
        while nxt >= 0 and hit is None:
            span = _record_at(data, nxt, 2)
            if isinstance(span, tuple) and (cmd := _command(data[span[0]:span[1]])) is not None:
                hit = (nxt, span[1], cmd)
            nxt = data.find(RECORD_MAGIC, nxt + 1)
        if version == 1:
            for off in range(at, len(data) - V1_HEADER.size):
                span = _record_at(data, off, 1)
                if isinstance(span, tuple) and (cmd := _command(data[span[0]:span[1]])) is not None:
                    hit = (off, span[1], cmd)
                    break
        if hit is None:
            break
        out.append(hit)
        at = hit[1]
    return out


def damaged(seg: Segment, record: int | None = None, detail: str | None = None, offset: int | None = None) -> InputError:
    """E140 for damage in ``seg`` (at its first damage unless told)."""
    return InputError("E140", segment=str(seg.path), offset=seg.end if offset is None else offset,
                      record=seg.last if record is None else record, detail=detail or seg.damage,
                      directory=str(seg.path.parent))


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
        """Yield ``(index, command)`` for every record with index >= ``start`` (the first record
        a snapshot does not hold), reading the segments from the one that holds ``start``.
        Every segment is read and checked before the first command is yielded: damage that is
        not a tail raises E140 having changed nothing; a tail is cut.  Afterwards the log
        appends after the last record."""
        read = self._read_from(start)
        tail = read[-1] if read else None
        if tail is not None and tail.damage is not None:
            self._cut_tail(tail)
        for seg in read:
            for i, cmd in enumerate(seg.commands, seg.first):
                if i >= start:
                    yield i, cmd
        self.next_index = max(tail.last if tail is not None else start, start)
        self._open_tail(tail)

    def _read_from(self, start: int) -> list[Segment]:
        """The segments recovery needs, read; raises E140 on damage that is not a tail."""
        segs = segments(self.dir)
        needed = [(first, path) for first, path in segs if first > start]
        before = [(first, path) for first, path in segs if first <= start]
        if before:
            needed.insert(0, before[-1])
        elif needed:
            first, path = needed[0]
            raise InputError("E140", segment=str(path), offset=0, record=start, directory=str(self.dir),
                             detail=f"the log starts at record {first}, after the snapshot's next record {start}: "
                                    f"records {start}..{first - 1} are missing")
        read: list[Segment] = []
        for n, (first, path) in enumerate(needed):
            if read and first != read[-1].last:  # a lost segment, or records lost at its end
                raise damaged(read[-1], detail=f"the next segment, {path.name}, starts at record {first}, "
                                               f"not {read[-1].last}")
            seg = read_segment(path, first)
            if seg.damage is not None and (n < len(needed) - 1 or seg.after):
                why = seg.damage
                if seg.after:
                    why += f"; {len(seg.after)} whole record(s) follow at byte {seg.after[0][0]} on"
                raise damaged(seg, detail=why)
            read.append(seg)
        return read

    def _cut_tail(self, seg: Segment) -> None:
        size = seg.path.stat().st_size
        cut = seg.end if seg.end > len(SEGMENT_MAGIC) or seg.version == 1 else 0  # a torn header: rewritten
        with open(seg.path, "r+b") as fh:
            fh.seek(cut)
            rest = fh.read()
            if rest.strip(b"\0"):  # not only zeros: keep it aside for a post-mortem
                aside = _aside(seg.path, f"@{cut}")
                aside.write_bytes(rest)
                fsync_path(aside)
            fh.truncate(cut)
            os.fsync(fh.fileno())
        self.truncated_bytes += size - cut
        print(f"skype serve: log {seg.path.name}: damaged tail ({seg.damage}), cut {size - cut} bytes at byte {cut} "
              f"after record {seg.last - 1}", file=sys.stderr)

    def _open_tail(self, tail: Segment | None) -> None:
        if tail is not None and tail.version == 2 and tail.last == self.next_index:
            path = tail.path  # go on appending to it
        else:  # no segment, a format-1 one, or one that ends before the snapshot: a new segment
            path = self.dir / f"log-{self.next_index:016d}.wal"
        self._open(path)

    def _open(self, path: Path) -> None:
        self._fh = open(path, "ab", buffering=0)
        if self._fh.tell() == 0:
            self._fh.write(SEGMENT_MAGIC)  # durable with the first record's fsync
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
        """Make every appended record durable per the fsync policy.  The log stays dirty until
        an ``fsync`` succeeds (a failed one raises, and the caller must stop acknowledging)."""
        if not self._dirty:
            return
        if self.fsync == "never":
            self._dirty = False
            return
        t0 = time.perf_counter()
        os.fsync(self._fh.fileno())
        self._dirty = False
        if self.on_sync is not None:
            self.on_sync(time.perf_counter() - t0)

    def rotate(self) -> None:
        """Start a new segment at the next record (after a snapshot)."""
        self.sync()
        self._fh.close()
        self._open(self.dir / f"log-{self.next_index:016d}.wal")

    def drop_before(self, index: int) -> None:
        """Delete the segments whose records all precede ``index``."""
        segs = segments(self.dir)
        for (first, path), (nxt, _) in zip(segs, segs[1:]):
            if nxt <= index:
                path.unlink()

    def size(self) -> int:
        return sum(p.stat().st_size for _, p in segments(self.dir))

    def close(self) -> None:
        if self._fh is not None:
            self.sync()
            self._fh.close()
            self._fh = None


def _aside(path: Path, suffix: str = "") -> Path:
    """A free ``<name><suffix>.corrupt`` name beside ``path`` (``.corrupt.N`` if taken)."""
    aside = path.with_name(f"{path.name}{suffix}.corrupt")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}{suffix}.corrupt.{n}")
        n += 1
    return aside


def fsync_path(path: Path) -> None:
    """Make a file's data, or a folder's entries (a rename, a new file), durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` whole or not at all: a temporary file, fsync, rename, fsync
    of the folder."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)

