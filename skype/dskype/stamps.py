"""The stamps a routed row carries in its ``summary`` column: which side tables the router used.

A routed row (:data:`skype.dskype.routing.ROUTED_SCHEMA_DDL`) names the version of whatever the router
read to route it, so that the partition can tell what it was routed by.  Two formats share the
column, one per kind of pipeline (never both on one row):

* **keyword summaries** (``prefix``, :mod:`skype.dskype.summaries`): ``<version>:<digest>``, the
  partition's published live terms the router used, or :data:`ALL` when it had none (every term
  routed);
* **ownership tables** (adaptive methods, :mod:`skype.dskype.handover`): ``tables:<u>:<v>``, the
  table version in force at the batch's start and the newest one its offset recorded;
* the empty string: neither (static methods).

The writers and parsers of both live here, and nowhere else parses the column.
"""

from __future__ import annotations

from typing import Iterable

ALL = "*"  # a summary stamp when the router had no table for the partition: every term routed
TABLES_STAMP = "tables:"


def summary_stamp(version: int, digest: str) -> str:
    """The stamp of a row routed by a partition's summary ``version`` with content ``digest``.

    >>> summary_stamp(7, "ab12"), summary_parts(summary_stamp(7, "ab12"))
    ('7:ab12', (7, 'ab12'))
    """
    return f"{int(version)}:{digest}"


def summary_parts(stamp: str) -> tuple[int, str]:
    """``(version, digest)`` of a summary stamp (not :data:`ALL`)."""
    version, _, dig = stamp.partition(":")
    return int(version), dig


def summary_digest(stamp: str) -> str:
    """The digest a summary stamp names (not :data:`ALL`)."""
    return summary_parts(stamp)[1]


def tables_stamp(version: int, in_force: int | None = None) -> str:
    """The stamp of a routed row of an adaptive pipeline: the table version in force at the
    batch's start and the newest one its offset recorded (announced, in force from the next batch).

    >>> tables_stamp(3, 2), stamped_tables((tables_stamp(3, 2),)), stamped_tables(("tables:4",))
    ('tables:2:3', (2, 3), (4, 4))
    >>> stamped_tables(("",)) is None
    True
    """
    return f"{TABLES_STAMP}{int(version if in_force is None else in_force)}:{int(version)}"


def stamped_tables(stamps: Iterable[str]) -> tuple[int, int] | None:
    """(in force, newest): the table versions a partition's rows carry, None if none."""
    pairs = []
    for s in stamps:
        if s and s.startswith(TABLES_STAMP):
            parts = s[len(TABLES_STAMP):].split(":")
            pairs.append((int(parts[0]), int(parts[-1])))
    return max(pairs) if pairs else None
