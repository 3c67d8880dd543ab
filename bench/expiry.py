"""The expiry and its re-evaluations, A/B in one process (issue 35, EMP): engines prepared the paper's
way on one seeded workload (fill the window, register in bulk, turn the window over), each with its
own pull, then the measured messages in chunks, the engines alternating and each leading in turn,
every chunk timed in process CPU time (``time.process_time``) and every chunk's result changes
asserted equal.

Variants (``--variants``, comma-separated):

* ``plain``: the message index's entries are bounded with the query's other terms alone (the bound
  before entry signatures);
* ``sig``: an entry is bounded with its signature (the default engine);
* a ``+qcN`` suffix: the cost model's ``query_cost`` set to N (default 10): a dearer re-evaluation
  makes cSkyband keep a deeper buffer (a lower theta), so fewer re-evaluations for more admissions.

Reported per measured message: CPU microseconds, the phase clocks (wall, inside the core: expire,
and the re-evaluations inside it), the expiry's holder visits and re-evaluations, and the message
index's work per re-evaluation: heap pops, entries bounded, entries popped (each a window record
read), of them designated to the popped entry's term, messages returned in ranking order.

    python bench/expiry.py --num-subs 200000 --measured 40000
    python bench/expiry.py --num-subs 100000 --measured 20000 --variants plain,sig+qc20
"""

from __future__ import annotations

import argparse
import json
import time

INDEX = ("queries", "query_work", "query_pushes", "query_entry_bounds", "query_reads", "query_reads_designated", "query_reported")
PHASES = ("expire", "holder_entries", "holders_visited", "reevaluate", "flush_events")


def snapshot(engine) -> dict:
    s = engine.stats()
    c = s["phases"]["counts"]
    out = {k: c[k] for k in PHASES}
    out.update({f"index_{k}": s["message_index"][k] for k in INDEX})
    out["reevaluations"] = s["reevaluations"]
    out["threshold_refreshes"] = s["threshold_refreshes"]
    out.update({f"clock_{k}": v for k, v in (s["phases"]["seconds"] or {}).items() if v is not None})
    return out


def configure(name: str) -> None:
    """Set the module switches a variant's engine reads at its construction."""
    from skype._core.termlists import set_entry_signatures

    plan, *suffixes = name.split("+")
    assert plan in ("plain", "sig") and all(x.startswith("qc") for x in suffixes), "variants: plain|sig[+qcN]"
    set_entry_signatures(plan == "sig")


def engine_params(name: str) -> tuple:
    """The Engine keywords of a variant (besides the timers)."""
    cost = {"query_cost": float(x[2:]) for x in name.split("+")[1:] if x.startswith("qc")}
    return (("timers", True),) + ((("cost", cost),) if cost else ())


def main(argv=None) -> int:
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
    p.add_argument("--variants", default="plain,sig")
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    window = args.window or args.num_subs
    turnover = window if args.turnover is None else args.turnover
    engines, starts, prep_s = {}, {}, {}
    msgs = None
    for name in variants:
        t0 = time.perf_counter()
        configure(name)
        spec = RunSpec(dataset=args.dataset, num_subs=args.num_subs, window=window, measured=turnover + args.measured,
                       index=args.index, buffer=args.buffer, seed=args.seed, params=engine_params(name))
        prep = prepare(spec)
        msgs = prep.workload.messages
        engines[name], starts[name] = prep.engine, prep.turn_over(turnover)
        prep_s[name] = time.perf_counter() - t0
        assert starts[name] == starts[variants[0]]
    configure("sig")
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
        q = d["index_queries"] or 1
        row["per_reevaluation"] = {k[len("index_query_"):] if k != "index_query_work" else "work": d[k] / q
                                   for k in d if k.startswith("index_query")}
        row["per_expiry"] = {k: d[k] / (d["expire"] or 1) for k in ("holder_entries", "holders_visited")}
        row["reevaluations_per_1000_msgs"] = d["reevaluate"] / n * 1000
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
