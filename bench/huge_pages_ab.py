"""Huge pages on the engine's large arrays, on against off, paired in one process (issue 35).

``skype._core.hugepages`` advises ``madvise(MADV_HUGEPAGE)`` on the window's rings (messages,
terms, holders, the id set) as they grow.  The advice is process-wide, so the two engines are
prepared one after the other the paper's way on the same seeded workload (fill the window,
register in bulk, turn the window over), the first with the advice on and the second with it
off, and the measured messages then go to both in chunks, in alternating order, each chunk
timed in process CPU time with the advice set as its engine was built.  Every chunk's result
changes must be equal (asserted).  Reported: CPU microseconds per measured message each, their
ratio, the bytes advised, and the process's ``AnonHugePages`` (how much the kernel really
backed with 2-MB pages).

    python bench/huge_pages_ab.py --num-subs 200000 --measured 40000
"""

from __future__ import annotations

import argparse
import json
import time


def anon_huge_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return 0


def main(argv=None) -> int:
    from skype._core.hugepages import huge_pages, set_huge_pages
    from skype.experiments.harness import RunSpec, prepare

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-subs", type=int, default=200_000)
    p.add_argument("--window", type=int, default=None, help="count window (default: --num-subs)")
    p.add_argument("--measured", type=int, default=40_000)
    p.add_argument("--chunk", type=int, default=2_000, help="messages per timed chunk")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    window = args.window or args.num_subs
    engines, huge, start = {}, {}, 0
    for name, flag in (("huge", True), ("plain", False)):
        set_huge_pages(flag)
        before = anon_huge_kb()
        spec = RunSpec(dataset="tweets", num_subs=args.num_subs, window=window, measured=window + args.measured, index="cone",
                       seed=args.seed)
        prep = prepare(spec)
        msgs = prep.workload.messages
        for a in range(prep.start, prep.start + window, 20_000):
            prep.engine.publish_batch(msgs.slice(a, min(a + 20_000, prep.start + window)))
        engines[name], start = prep.engine, prep.start + window
        huge[name] = {"advised_bytes_so_far": huge_pages()["advised_bytes"],
                      "anon_huge_kb_added": anon_huge_kb() - before}
    cpu = {name: 0.0 for name in engines}
    names = list(engines)
    for c, a in enumerate(range(start, start + args.measured, args.chunk)):
        part = msgs.slice(a, min(a + args.chunk, start + args.measured))
        rows = {}
        for name in names[c % 2:] + names[:c % 2]:       # each engine leads in turn
            set_huge_pages(name == "huge")
            t = time.process_time()
            log = engines[name].publish_batch(part)
            cpu[name] += time.process_time() - t
            rows[name] = sorted(zip(log.at.tolist(), log.sub.tolist(), log.msg.tolist(), log.entered.tolist()))
        assert rows["huge"] == rows["plain"], f"chunk {c}: the result changes differ"
    n = args.measured
    out = {"args": vars(args), "huge_pages": huge,
           **{name: {"cpu_us_per_msg": cpu[name] / n * 1e6} for name in names},
           "cpu_ratio_plain_over_huge": cpu["plain"] / cpu["huge"] if cpu["huge"] else float("nan")}
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
