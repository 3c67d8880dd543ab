"""The least communication any exact router could have: per message, the partitions hosting a
subscription whose top-k the message ever enters.

    python -m skype.run distributed --dataset tweets --num-subs 20000 --num-messages 20000 --window 5000 \
        --method agrid --partitions 16 --master 'local[2]' --batch-size 2000 --checkpoint run
    python bench/exact_routing_bound.py run --first 5000 --last 15000

A router that sends a message to fewer partitions than this loses a result change on one of the
others, whatever summaries it keeps and whatever it knows of the future: the bound is read from
the run's own result-change events (every ``entered`` entry of every subscription; a method that
places each subscription on one partition writes its events in the partition's own file,
``batch-<id>-part-p<key>``; an entry that comes and goes within one batch is netted out of the
events, so the bound is for results exact at every batch, as the runtime's are).  Messages
published while the window fills (``--first``) and in the
stream's last window (``--last``: they have not lived a whole window yet) are left out.  It applies
to methods with one replica per subscription (``location``, ``hashing``, the adaptive ones).
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np


def partitions_entered(run_dir: Path) -> tuple[dict[int, set[str]], set[str]]:
    """Message position -> the partition labels on which it entered some top-k; all labels."""
    import pyarrow.parquet as pq

    entered: dict[int, set[str]] = collections.defaultdict(set)
    labels: set[str] = set()
    for path in sorted(run_dir.glob("events/*/batch-*-part-p*.parquet")):
        label = path.stem.rsplit("-part-", 1)[1]
        labels.add(label)
        for row in pq.read_table(path, columns=["entered"]).to_pylist():
            for entry in row["entered"] or ():
                entered[int(entry["seq"])].add(label)
    return entered, labels


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python bench/exact_routing_bound.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path, help="a distributed run's directory (--checkpoint), events as Parquet")
    p.add_argument("--first", type=int, required=True, help="first message position counted")
    p.add_argument("--last", type=int, required=True, help="first message position not counted")
    args = p.parse_args(argv)
    entered, labels = partitions_entered(args.run_dir)
    counts = np.array([len(entered.get(s, ())) for s in range(args.first, args.last)])
    out = {"run_dir": str(args.run_dir), "partitions": len(labels), "messages": int(len(counts)),
           "mean": float(counts.mean()), "median": float(np.median(counts)),
           "p90": float(np.percentile(counts, 90)), "max": int(counts.max()),
           "entered_nowhere": float(np.mean(counts == 0))}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
