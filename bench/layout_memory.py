"""The engine's bytes by part after filling a window and registering in bulk, and optionally
after one turnover (issue 35, the compact layouts): ``stats()["memory_parts"]`` and
``memory_bytes`` (deterministic for a seed), the message index's own split
(``TermLists.memory_parts``: live entries, dead prefix, spare capacity, headers, per-term
records) and the process's RSS (heap trimmed first) and peak.  One JSON line per stage; run it
once per build (checkout) and compare.

    python bench/layout_memory.py --num-subs 200000 --turnover
"""

from __future__ import annotations

import argparse
import gc
import json
import time


def main(argv=None) -> int:
    from skype.experiments.harness import RunSpec, prepare
    from skype.report import peak_rss_bytes, release_free_memory, rss_bytes

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-subs", type=int, default=200_000)
    p.add_argument("--turnover", action="store_true", help="also report after one window of messages")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    n = args.num_subs
    t = time.process_time()
    prep = prepare(RunSpec(dataset="tweets", num_subs=n, window=n, measured=n + 1000, index="cone", seed=args.seed))

    def report(stage: str) -> None:
        release_free_memory()
        st = prep.engine.stats()
        lists = [o for o in gc.get_referents(prep.engine._core) if type(o).__name__ == "TermLists"]
        split = lists[0].memory_parts() if lists and hasattr(lists[0], "memory_parts") else {}
        mb = lambda d: {k: round(v / 2**20, 1) for k, v in d.items()}  # noqa: E731
        print(json.dumps({"stage": stage, "parts_mb": mb(st["memory_parts"]), "memory_mb": mb(st["memory_bytes"]),
                          "message_index_mb": mb(split), "rss_mb": rss_bytes() >> 20,
                          "peak_mb": peak_rss_bytes() >> 20, "cpu_s": round(time.process_time() - t, 1)}),
              flush=True)

    report("registered")
    if args.turnover:
        msgs = prep.workload.messages
        for a in range(prep.start, prep.start + n, 20_000):
            prep.engine.publish_batch(msgs.slice(a, min(a + 20_000, prep.start + n)))
        report("turned over")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
