"""The operator's view of a service log: what a repair would drop (:func:`check`), and the
repair (:func:`repair`), behind ``python -m skype.run wal check|repair DIR``.

Recovery (:meth:`skype.service.wal.Log.recover`) reads the segments from the one holding the
first record the newest good snapshot lacks; it cuts a damaged tail by itself and refuses (E140)
any other damage.  :func:`check` reads every segment the same way and reports the first damage in
what recovery reads: a repair drops from there on (the rest of that segment and every later
segment, since records after a damage cannot be numbered or replayed in order), and tells which
whole records that loses (their message ids, subscription ids, advances) and the log position
the repaired log ends at.  Damage only in older segments (which only the older snapshot needs) is
reported and left.  :func:`repair` moves the dropped bytes aside into ``.corrupt`` files (never
deletes) and fsyncs; it changes nothing on a clean log.  Neither touches the snapshots.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skype.errors import InputError
from skype.service.wal import SEGMENT_MAGIC, Segment, _aside, fsync_path, read_segment, segments

@dataclass
class Drop:
    """What a repair drops: ``segment`` from byte ``offset`` to its end, and every later segment."""

    segment: Path
    offset: int
    record: int  # the number of the first record dropped (records after a damage: numbers unknown)
    reason: str
    tail: bool  # the server cuts this by itself when it starts
    later: list[Path]  # later segments, dropped whole
    bytes: int  # every byte dropped
    damaged_bytes: int  # of which not part of any whole record (contents unknown)
    commands: list  # the whole records dropped: they read back, but follow the damage
    position: int | None  # messages before the first record dropped (the repaired log's end), if known

    def lost(self) -> dict:
        """The dropped whole records by kind: message ids, subscription ids, advances."""
        out: dict[str, Any] = {"records": len(self.commands), "messages": 0, "message_ids": [],
                               "subscriptions": [], "unsubscriptions": [], "advances": []}
        for cmd in self.commands:
            op = cmd.get("op")
            if op == "msgs":
                recs = cmd["recs"] if "recs" in cmd else \
                    [json.loads(line) for line in cmd["ndjson"].splitlines() if line.strip()]
                out["messages"] += len(recs)
                out["message_ids"] += [r.get("id") for r in recs if isinstance(r, dict)]
            elif op == "sub":
                out["subscriptions"].append(cmd["rec"].get("id") if isinstance(cmd["rec"], dict) else None)
            elif op == "unsub":
                out["unsubscriptions"].append(cmd["id"])
            elif op == "advance":
                out["advances"].append(cmd["t"])
        return out


@dataclass
class Report:
    """What :func:`check` found (and :func:`repair` then did)."""

    log_dir: Path
    snapshot: Path | None  # the newest snapshot that checks out: recovery starts from it
    start: int  # the first record recovery replays
    segments: list[Segment]
    drop: Drop | None  # damage in what recovery reads: what a repair drops
    elsewhere: list[str]  # damage in segments recovery does not read (before the snapshot's)
    moved: list[Path] = field(default_factory=list)  # the .corrupt files a repair wrote

    @property
    def clean(self) -> bool:
        return self.drop is None

    def as_dict(self) -> dict:
        d = self.drop
        return {"log": str(self.log_dir), "snapshot": str(self.snapshot) if self.snapshot else None,
                "start": self.start, "clean": self.clean, "elsewhere": self.elsewhere,
                "segments": [{"name": s.path.name, "first": s.first, "records": len(s.commands), "bytes": s.size,
                              "format": s.version, "damage": s.damage, "damage_offset": s.end if s.damage else None}
                             for s in self.segments],
                "drop": None if d is None else {
                    "segment": d.segment.name, "offset": d.offset, "record": d.record, "reason": d.reason,
                    "tail": d.tail, "later_segments": [p.name for p in d.later], "bytes": d.bytes,
                    "damaged_bytes": d.damaged_bytes, "position": d.position, **d.lost()},
                "moved": [str(p) for p in self.moved]}

    def describe(self) -> str:
        lines = [f"log {self.log_dir}: {len(self.segments)} segment(s), "
                 f"{sum(len(s.commands) for s in self.segments)} whole record(s) before any damage; recovery starts at record "
                 f"{self.start} ({'snapshot ' + self.snapshot.name if self.snapshot else 'no snapshot'})"]
        lines += [f"  not read by recovery (before the snapshot): {e}" for e in self.elsewhere]
        d = self.drop
        if d is None:
            lines.append("clean: a repair would drop nothing")
            return "\n".join(lines)
        lost = d.lost()
        verb = "dropped" if self.moved else "a repair drops"
        lines += [f"damage: {d.segment.name} byte {d.offset} (record {d.record}): {d.reason}"
                  + (" -- a tail: the server cuts it by itself" if d.tail else " -- the server refuses to start (E140)"),
                  f"{verb}: {d.bytes} bytes ({d.damaged_bytes} unreadable)"
                  + (f" and the later segments {', '.join(p.name for p in d.later)}" if d.later else ""),
                  f"  {lost['records']} whole record(s) after the damage: {lost['messages']} message(s)"
                  + (f" (ids {_ids(lost['message_ids'])})" if lost["message_ids"] else "")
                  + f", subscriptions put {_ids(lost['subscriptions'])}, deleted {_ids(lost['unsubscriptions'])}, "
                  f"{len(lost['advances'])} advance(s)"]
        if d.position is not None:
            lines.append(f"  the repaired log ends at position {d.position} (messages); every write after it is "
                         "dropped, acknowledged or not")
        lines += [f"  moved aside: {p}" for p in self.moved]
        return "\n".join(lines)


def _ids(ids: list) -> str:
    if not ids:
        return "none"
    shown = ", ".join(map(str, ids[:20]))
    return shown + (f" ... ({len(ids)} in all)" if len(ids) > 20 else "")


def _dirs(path: str | Path) -> tuple[Path, Path | None]:
    """(log folder, snapshots folder) of a data directory or of its ``log`` folder."""
    p = Path(path)
    if (p / "log").is_dir():
        return p / "log", p / "snapshots"
    if not p.is_dir():
        raise InputError("E141", action="check", path=str(p), detail="no such directory")
    return p, (p.parent / "snapshots" if p.name == "log" else None)


def _messages(cmd: dict) -> int:
    if cmd.get("op") != "msgs":
        return 0
    if "recs" in cmd:
        return len(cmd["recs"])
    return sum(1 for line in cmd["ndjson"].splitlines() if line.strip())


def check(path: str | Path) -> Report:
    """Read the log of a data directory (or a log folder) and say what :func:`repair` would
    drop; change nothing.  Recovery starts at the newest snapshot whose files match their
    checksums; damage in the segments it reads is what a repair drops (from the first damage on:
    the rest of that segment and every later segment); damage only in older segments is
    reported and left."""
    from skype.service import snapshot

    log_dir, snap_dir = _dirs(path)
    snap = snapshot.newest_good(snap_dir) if snap_dir is not None and snap_dir.is_dir() else None
    start, position = (int(snap[1]["log_index"]), int(snap[1]["position"])) if snap else (0, 0)
    segs = [read_segment(p, first) for first, p in segments(log_dir)]
    before = [s for s in segs if s.first <= start]
    needed = before[-1:] + [s for s in segs if s.first > start]
    elsewhere = [f"{s.path.name} byte {s.end} (record {s.last}): {s.damage}" for s in before[:-1] if s.damage]
    report = Report(log_dir, snap[0] if snap else None, start, segs, None, elsewhere)
    at: tuple[Segment, int, int, str] | None = None  # (segment, offset, record, reason)
    if needed and needed[0].first > start:
        at = (needed[0], 0, start, f"the log starts at record {needed[0].first}, after the snapshot's {start}")
    for n, seg in enumerate(needed):
        if at is not None:
            break
        position += sum(_messages(c) for i, c in enumerate(seg.commands, seg.first) if i >= start)
        if seg.damage is not None:
            at = (seg, seg.end, seg.last, seg.damage)
        elif n + 1 < len(needed) and needed[n + 1].first != seg.last:  # the later segments cannot follow
            at = (seg, seg.end, seg.last, f"the next segment, {needed[n + 1].path.name}, starts at record "
                                          f"{needed[n + 1].first}, not {seg.last}")
    if at is None:
        return report
    seg, offset, record, reason = at
    later = needed[needed.index(seg) + 1:]
    whole = [c for i, c in enumerate(seg.commands, seg.first) if seg.offsets[i - seg.first] >= offset]
    whole += [c for _, _, c in seg.after] + [c for s in later for c in s.commands + [a[2] for a in s.after]]
    dropped = seg.size - offset + sum(s.size for s in later)
    unreadable = dropped - _whole_bytes(seg, offset) - sum(_whole_bytes(s, 0) for s in later)
    tail = seg is needed[-1] and not seg.after and offset == seg.end and seg.damage is not None
    report.drop = Drop(seg.path, offset, record, reason, tail, [s.path for s in later], dropped,
                       unreadable, whole, position if record >= start else None)
    return report


def _whole_bytes(seg: Segment, offset: int) -> int:
    """Bytes of ``seg`` from ``offset`` on that belong to its header or to whole records."""
    n = len(SEGMENT_MAGIC) if offset == 0 and seg.version == 2 and seg.size >= len(SEGMENT_MAGIC) \
        and (seg.commands or seg.end >= len(SEGMENT_MAGIC)) else 0
    ends = seg.offsets[1:] + [seg.end]
    n += sum(e - o for o, e in zip(seg.offsets, ends) if o >= offset)
    return n + sum(e - o for o, e, _ in seg.after)


def repair(path: str | Path) -> Report:
    """Drop what :func:`check` reports, moving it aside rather than deleting it: the damaged
    segment's bytes from the damage on go to ``<segment>@<offset>.corrupt`` (the segment is cut
    there), every later segment is renamed ``<segment>.corrupt``.  Returns the report, with the
    files written in ``moved``.  A clean log is left as it is."""
    report = check(path)
    d = report.drop
    if d is None:
        return report
    if d.offset == 0:
        aside = _aside(d.segment)
        d.segment.rename(aside)
        report.moved.append(aside)
    elif d.offset < d.segment.stat().st_size:
        aside = _aside(d.segment, f"@{d.offset}")
        with open(d.segment, "r+b") as fh:
            fh.seek(d.offset)
            aside.write_bytes(fh.read())
            fsync_path(aside)
            fh.truncate(d.offset)
            os.fsync(fh.fileno())
        report.moved.append(aside)
    for p in d.later:
        moved = _aside(p)
        p.rename(moved)
        report.moved.append(moved)
    fsync_path(report.log_dir)
    return report
