"""The admissions and the expiry, A/B in one process (issue 35, deliverable 3): engines prepared the
paper's way on one seeded workload (fill the window, register in bulk, turn the window over), each
with its own admission plan, then the measured messages in chunks, the engines alternating and
each leading in turn, every chunk timed in process CPU time (``time.process_time``) and every
chunk's result changes asserted equal.

Variants (``--variants``, comma-separated):

* ``full``: an admission searches its whole buffer and fetches all of its lines (at most 16);
* ``guided``: it starts at the buffer record's guide point (the default engine);
* a ``+inexact`` suffix: the engine keeps inexact holders (an eviction writes no holder entry;
  the expiry then visits stale ones), to see what the eviction's holder writes cost;
* a ``+smallpages`` suffix: the buffer arena keeps 4 KB pages (no class moves to 2 MB pages);
* an ``@R/E`` suffix: buffer records fetched R admissions (and expiry visits) ahead, their
  entries E ahead (default 8/4).

Reported per measured message: CPU microseconds, the phase clocks (wall, inside the core),
admissions and their work (entries from where a search starts to the buffer's end, insertion
ranks, buffer sizes, evictions, guides contradicted), and the expiry's (holder entries read,
holders visited and found, re-evaluations with their seconds, flush events).

    python bench/admissions.py --num-subs 200000 --measured 40000
    python bench/admissions.py --num-subs 100000 --measured 40000 --variants guided,guided+inexact
"""

from __future__ import annotations

import argparse
import json
import time

ADMISSION = ("span_entries", "ranks", "sizes", "evicted", "guide_misses")
EXPIRY = ("expire", "holder_entries", "holders_visited", "holders_found", "holders_dropped", "reevaluate",
          "flush_events", "flush_changes", "admit", "admits_in_topk", "verify")


def snapshot(engine) -> dict:
    s = engine.stats()
    c = s["phases"]["counts"]
    out = {k: c[k] for k in EXPIRY}
    out.update({f"admission_{k}": s["admission_work"][k] for k in ADMISSION})
    out["reevaluations"] = s["reevaluations"]
    out["threshold_refreshes"] = s["threshold_refreshes"]
    out.update({f"clock_{k}": v for k, v in (s["phases"]["seconds"] or {}).items() if v is not None})
    return out


def main(argv=None) -> int:
    from skype._core.arena import set_huge_after
    from skype._core.buffers import set_admission_guide, set_prefetch_distance
    from skype.experiments.harness import RunSpec, prepare, publish_paired

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="tweets", choices=["tweets", "geonames"])
    p.add_argument("--num-subs", type=int, default=200_000)
    p.add_argument("--window", type=int, default=None, help="count window (default: --num-subs)")
    p.add_argument("--measured", type=int, default=40_000)
    p.add_argument("--turnover", type=int, default=None, help="messages after registration (default: --window)")
    p.add_argument("--buffer", default="cskyband")
    p.add_argument("--index", default="cone")
    p.add_argument("--chunk", type=int, default=2_000, help="messages per timed chunk")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default="full,guided")
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    assert all(v.split("@")[0].split("+")[0] in ("full", "guided") for v in variants), \
        "variants: full|guided[+inexact][@R/E]"
    window = args.window or args.num_subs
    turnover = window if args.turnover is None else args.turnover
    engines, starts, prep_s = {}, {}, {}
    for name in variants:
        t0 = time.perf_counter()
        plan, _, ahead = name.partition("@")
        set_admission_guide(plan.split("+")[0] == "guided")
        set_prefetch_distance(*(int(v) for v in (ahead or "8/4").split("/")))
        set_huge_after(0 if "+smallpages" in plan else 8)
        params = (("timers", True),) + ((("exact_holders", False),) if "+inexact" in plan else ())
        spec = RunSpec(dataset=args.dataset, num_subs=args.num_subs, window=window, measured=turnover + args.measured,
                       index=args.index, buffer=args.buffer, seed=args.seed, params=params)
        prep = prepare(spec)
        msgs = prep.workload.messages
        engines[name], starts[name] = prep.engine, prep.turn_over(turnover)
        prep_s[name] = time.perf_counter() - t0
        assert starts[name] == starts[variants[0]]
    set_admission_guide(True)
    set_prefetch_distance(8, 4)
    set_huge_after(8)
    first = starts[variants[0]]
    before = {name: snapshot(e) for name, e in engines.items()}
    cpu = publish_paired({name: engines[name] for name in variants}, msgs, first, args.measured, args.chunk)
    n = args.measured
    out = {"args": vars(args), "prepare_s": prep_s}
    for name, e in engines.items():
        after = snapshot(e)
        d = {k: after[k] - before[name].get(k, 0) for k in after}
        row = {"cpu_us_per_msg": cpu[name] / n * 1e6}
        row.update({f"{k}_per_msg": v / n for k, v in d.items() if not k.startswith("clock_")})
        row.update({f"{k}_us_per_msg": v / n * 1e6 for k, v in d.items() if k.startswith("clock_")})
        adm = d["admit"] or 1
        row["per_admission"] = {k: d[f"admission_{k}"] / adm for k in ADMISSION}
        row["per_admission"]["span_lines"] = d["admission_span_entries"] / adm * e.stats()["admission_work"]["entry_bytes"] / 64
        row["arena"] = {k: e.stats()["buffer_arena"][k] for k in ("huge_classes", "page_bytes", "live_bytes")}
        row["per_expiry"] = {k: d[k] / (d["expire"] or 1) for k in ("holder_entries", "holders_visited",
                                                                    "holders_found", "flush_events")}
        row["expiry_reevaluations_per_1000_msgs"] = d["reevaluations"] / n * 1000
        out[name] = row
    for name in variants[1:]:
        out[f"cpu_ratio_{variants[0]}_over_{name}"] = cpu[variants[0]] / cpu[name] if cpu[name] else float("nan")
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
