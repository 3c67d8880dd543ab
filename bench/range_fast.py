"""Issue 26, deliverable 4: continuous ``range`` on the FAST workload, per arriving message.

The workload of the FAST comparison (Mahmood, Aly, Aref, ICDE 2018): geonames, 20k ``range``
subscriptions whose rectangles cover 1% of the space, ``match`` all or any, a 30k window, 30k
measured messages (``generate --seed``, so every run sees the same stream).  The subscriptions
register once the window is full (``simulate --fill-window --turnover 0``), then the 30k
messages are measured: each arrives and pushes the oldest out.

Reported per measured message, for each ``match`` and each range index (``--index``):
``amp_us`` (the engine's time per arriving message: the window insertion and the probe of the
range index, what the issue compares with FAST), ``emp_us`` (per expiring message), ``range_us``
(the range kind's share of both, its probes and events), ``cpu_us`` (process CPU time of the
measured stream, Python included, per message), the counters (``probed``, ``matches``) and the
range index's memory.  ``--index`` ``keyword`` is the keyword-first index (the default),
``grid`` the older per-term grid lists (``CoreQueryKinds.RANGE_INDEX``); with several indexes
and ``--rounds R`` the runs alternate, so both see the same machine load.

    python bench/range_fast.py                           # all and any, the default index, one round
    python bench/range_fast.py --index keyword,grid --rounds 3      # A/B, interleaved
    python bench/range_fast.py --continuous --measured 10000      # 100k/100k tweets, any: both indexes
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*QueryCore*publish_batch*' \\
        python bench/range_fast.py --match all --measured 3000      # instruction counts of the core's stream
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from skype.run import build_parser, main


def workload(folder: Path, match: str, seed: int, subs: int, window: int, measured: int) -> tuple[Path, Path]:
    m, s = folder / f"m_{seed}_{window + measured}.jsonl", folder / f"s_{match}_{seed}_{subs}.jsonl"
    if not (m.exists() and s.exists()):
        main(["generate", "--dataset", "geonames", "--num-subs", str(subs), "--num-messages", str(window + measured),
              "--sub-kinds", "range", "--rect-area", "0.01", "--match", match, "--seed", str(seed),
              "--messages-out", str(m), "--subscriptions-out", str(s)])
    return m, s


def run_once(m: Path, s: Path, window: int, index: str) -> dict:
    from skype.cli.simulate import load_inputs, make_engine, run_stream, window_of
    from skype.querykinds import CoreQueryKinds

    args = build_parser().parse_args(["simulate", "--messages", str(m), "--subscriptions", str(s), "--window",
                                      str(window), "--fill-window", "--turnover", "0", "--no-progress"])
    CoreQueryKinds.RANGE_INDEX = index
    inputs = load_inputs(args)
    engine = make_engine(args, inputs)
    c0 = time.process_time()
    d = run_stream(engine, inputs, batch_size=args.batch_size, progress=False, fill_window=window_of(args),
                   turnover=0)
    cpu = time.process_time() - c0
    q = d["engine_stats"]["queries"]
    k = q["kinds"]["range"]
    n = d["messages"]
    return {"amp_us": d["amp_us"], "emp_us": d["emp_us"], "range_us": k["time_s"] / n * 1e6,
            "stream_us": d["stream_s"] / n * 1e6, "cpu_us_upper": cpu / n * 1e6,
            "probed": k["probed"], "matches": k["matches"], "messages": n,
            "range_index_mb": round(q["range_index_bytes"] / 2**20, 1)}


def continuous_100k(subs: int, window: int, measured: int, chunk: int = 250) -> dict:
    """Issue 12's continuous ``range`` workload (tweets, ``subs`` subscriptions of 1% area, 1-3
    terms, ``any``, seeds of ``bench/test_queries.py``): both indexes in one process, fed the same
    chunks taking turns first; process CPU time per message (the machine is shared)."""
    import numpy as np

    from skype import Engine
    from skype.data import make_workload
    from skype.data.peer_workloads import peer_subscriptions
    from skype.querykinds import CoreQueryKinds

    w = make_workload("tweets", num_subs=1, num_messages=window + measured, seed=11)
    _, specs = peer_subscriptions(w.messages.slice(0, window), w.vocabulary, subs, np.random.default_rng(12),
                                  kinds={"range": 1.0}, area=0.01, sub_terms=(1, 3), match="any", bounds=w.bounds)
    engines = {}
    for index in ("keyword", "grid"):
        CoreQueryKinds.RANGE_INDEX = index
        e = Engine(window=window, vocabulary=w.vocabulary.copy(), bounds=w.bounds, snapshots=True)
        for c in w.messages.slice(0, window).batches(10_000):
            e.publish_batch(c)
        e.subscribe_many(specs)
        engines[index] = e
    spent = dict.fromkeys(engines, 0.0)
    names = list(engines)
    for i, c in enumerate(w.messages.slice(window, window + measured).batches(chunk)):
        for name in names if i % 2 == 0 else names[::-1]:
            t0 = time.process_time()
            engines[name].publish_batch(c)
            spent[name] += time.process_time() - t0
    out: dict = {}
    for name, e in engines.items():
        k = e.stats()["queries"]["kinds"]["range"]
        out[name] = {"cpu_msgs_per_s": round(measured / spent[name]), "cpu_us_per_msg": round(spent[name] / measured * 1e6, 2),
                     "matches": k["matches"], "probed": k["probed"],
                     "range_index_mb": round(e.stats()["queries"]["range_index_bytes"] / 2**20, 1)}
    return out


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--match", default="all,any", help="comma-separated: all, any (default: both)")
    p.add_argument("--index", default="keyword", help="comma-separated: keyword, grid (default: keyword)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--subs", type=int, default=20_000)
    p.add_argument("--window", type=int, default=30_000)
    p.add_argument("--measured", type=int, default=30_000)
    p.add_argument("--workdir", default=None, help="where the generated workload is kept (default: a temp folder)")
    p.add_argument("--json", default=None, help="write every run's figures here")
    p.add_argument("--continuous", action="store_true",
                   help="instead: issue 12's 100k/100k continuous range workload, both indexes interleaved")
    a = p.parse_args(argv)
    if a.continuous:
        print(json.dumps(continuous_100k(100_000, 100_000, a.measured), indent=1))
        return 0
    tmp = tempfile.TemporaryDirectory() if a.workdir is None else None
    folder = Path(a.workdir or tmp.name)  # type: ignore[union-attr]
    folder.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    for r in range(a.rounds):
        for match in a.match.split(","):
            m, s = workload(folder, match, a.seed, a.subs, a.window, a.measured)
            indexes = a.index.split(",")
            for index in indexes if r % 2 == 0 else indexes[::-1]:
                fig = run_once(m, s, a.window, index)
                fig.update(match=match, index=index, round=r)
                runs.append(fig)
                print(json.dumps(fig), flush=True)
    print("\nmedian over rounds (us per measured message; wall unless noted; indicative on a shared machine)")
    print(f"{'match':6} {'index':8} {'AMP':>7} {'EMP':>7} {'range':>7} {'matches/msg':>12}")
    for match in a.match.split(","):
        for index in a.index.split(","):
            sel = [f for f in runs if f["match"] == match and f["index"] == index]
            med = {key: statistics.median(f[key] for f in sel) for key in ("amp_us", "emp_us", "range_us")}
            print(f"{match:6} {index:8} {med['amp_us']:7.2f} {med['emp_us']:7.2f} {med['range_us']:7.2f} "
                  f"{sel[0]['matches'] / sel[0]['messages']:12.1f}")
    if a.json:
        Path(a.json).write_text(json.dumps(runs, indent=1) + "\n")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
