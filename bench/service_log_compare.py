"""The service's write-ahead log: the checksummed append-only file (skype.service.wal) against
SQLite in WAL mode, each made durable per commit (fsync; SQLite ``synchronous=FULL``).
Commits of small records (a subscription PUT, ~150 B) and of large ones (an NDJSON batch of
1,000 messages, ~150 kB).  Indicative: the disk and the machine are shared.

    PYTHONPATH=. python bench/service_log_compare.py
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from pathlib import Path

from skype.service.wal import Log

MSG = {"id": 1, "x": 2.35, "y": 48.85, "t": 1.0, "terms": {"coffee": 0.5, "croissant": 0.5, "paris": 0.7}}
SMALL = {"op": "sub", "rec": {"id": 1, "x": 2.35, "y": 48.85, "k": 10, "alpha": 0.5, "text": "coffee croissant"},
         "token": "x" * 32}
LARGE = {"op": "msgs", "recs": [dict(MSG, id=i) for i in range(1000)]}


def file_log(record: dict, n: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        log = Log(Path(d), "always")
        list(log.recover())
        t0 = time.perf_counter()
        for _ in range(n):
            log.append(record)
            log.sync()
        dt = time.perf_counter() - t0
        log.close()
    return n / dt


def sqlite_log(record: dict, n: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        db = sqlite3.connect(Path(d) / "log.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE log (i INTEGER PRIMARY KEY, payload BLOB)")
        t0 = time.perf_counter()
        for _ in range(n):
            db.execute("INSERT INTO log (payload) VALUES (?)", (json.dumps(record).encode(),))
        dt = time.perf_counter() - t0
        db.close()
    return n / dt


def main() -> None:
    for name, record, n in (("small", SMALL, 500), ("batch of 1,000 messages", LARGE, 100)):
        size = len(json.dumps(record))
        a, b = max(file_log(record, n) for _ in range(3)), max(sqlite_log(record, n) for _ in range(3))
        print(f"{name} ({size:,} B): file log {a:,.0f} commits/s, SQLite WAL {b:,.0f} commits/s (best of 3 x {n})")


if __name__ == "__main__":
    main()
