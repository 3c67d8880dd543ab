"""Issue 26, deliverable 4: continuous ``range`` on the FAST workload, per arriving message.

The workload of the FAST comparison (Mahmood, Aly, Aref, ICDE 2018): geonames, 20k ``range``
subscriptions whose rectangles cover 1% of the space, ``match`` all or any, a 30k window, 30k
measured messages (``generate --seed``, so every run sees the same stream).  The subscriptions
register once the window is full (``simulate --fill-window --turnover 0``), then the 30k
messages are measured: each arrives and pushes the oldest out.

Reported per measured message, for each ``match`` and each range index (``--index``):
``amp_us`` (the engine's time per arriving message: the window insertion and the probe of the
range index, what the issue compares with FAST), ``emp_us`` (per expiring message), ``range_us``
(the range kind's share of both, its probes and events), ``cpu_us`` / ``wall_us`` (process CPU
time / wall time of the measured ``publish_batch`` calls, Python's change log included), the counters (``probed``, ``matches``) and the
range index's memory.  ``--index`` ``keyword`` is the keyword-first index (the default),
``grid`` the older per-term grid lists (``CoreQueryKinds.RANGE_INDEX``); with several indexes
and ``--rounds R`` the runs alternate, so both see the same machine load.

    python bench/range_fast.py                           # all and any, the default index, one round
    python bench/range_fast.py --index keyword,grid --rounds 3      # A/B, interleaved
    python bench/range_fast.py --continuous --measured 10000      # 100k/100k tweets, any: both indexes
    python bench/range_fast.py --paired-lazy          # with / without the windows range alone does not read
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

from skype.run import main


def workload(folder: Path, match: str, seed: int, subs: int, window: int, measured: int) -> tuple[Path, Path]:
    m, s = folder / f"m_{seed}_{window + measured}.jsonl", folder / f"s_{match}_{seed}_{subs}.jsonl"
    if not (m.exists() and s.exists()):
        main(["generate", "--dataset", "geonames", "--num-subs", str(subs), "--num-messages", str(window + measured),
              "--sub-kinds", "range", "--rect-area", "0.01", "--match", match, "--seed", str(seed),
              "--messages-out", str(m), "--subscriptions-out", str(s)])
    return m, s


def run_once(m: Path, s: Path, window: int, index: str, batch: int = 1000) -> dict:
    """``simulate --fill-window --turnover 0``'s protocol, with the process CPU time of the
    measured ``publish_batch`` calls alone (the machine is shared: CPU time is steadier than wall)."""
    from skype.querykinds import CoreQueryKinds
    from skype.simulate import load_inputs, make_engine, split_fill, window_of, work_counts

    options = {"messages": str(m), "subscriptions": str(s), "window": window}
    CoreQueryKinds.RANGE_INDEX = index
    inputs = load_inputs(options)
    engine = make_engine(options, inputs)
    fill, steps = split_fill(inputs.steps, window_of(options))
    for part in fill:
        for c in part.batches(batch):
            engine.publish_batch(c)
    engine.subscribe_batch(inputs.subscriptions)
    engine.subscribe_batch(inputs.others)
    before = work_counts(engine)
    q0 = engine.stats()["queries"]["kinds"]["range"]
    cpu, wall, n = 0.0, 0.0, 0
    for op, payload in steps:
        assert op == "msgs"
        for c in payload.batches(batch):
            c0, w0 = time.process_time(), time.perf_counter()
            engine.publish_batch(c)
            cpu += time.process_time() - c0
            wall += time.perf_counter() - w0
            n += len(c)
    after = work_counts(engine)
    q = engine.stats()["queries"]
    k = q["kinds"]["range"]
    arrivals = after["arrivals"] - before["arrivals"]
    expirations = after["expirations"] - before["expirations"]
    return {"amp_us": (after["arrival_us"] - before["arrival_us"]) / arrivals,
            "emp_us": (after["expiry_us"] - before["expiry_us"]) / expirations,
            "range_us": (k["time_s"] - q0["time_s"]) / n * 1e6,
            "cpu_us": cpu / n * 1e6, "wall_us": wall / n * 1e6,
            "probed": k["probed"] - q0["probed"], "matches": k["matches"] - q0["matches"], "messages": n,
            "range_index_mb": round(q["range_index_bytes"] / 2**20, 1)}


def paired_lazy(m: Path, s: Path, window: int, batch: int = 250) -> dict:
    """The same engine twice on one stream, interleaved chunk by chunk (turns first alternate):
    ``before`` keeps the top-k core's window and the query window's ``ALL_TERM`` tree (as the
    engine did before both became lazy for a stream of ``range`` subscriptions alone), ``lazy``
    neither.  Both report the same change log (asserted per chunk); per measured message: AMP
    and EMP (the engine's timers), the range kind's part and the process CPU time."""
    import numpy as np

    from skype import Subscription
    from skype.simulate import load_inputs, make_engine, split_fill, window_of, work_counts

    options = {"messages": str(m), "subscriptions": str(s), "window": window}
    inputs = load_inputs(options)
    engines = {}
    steps: list = []
    for name in ("before", "lazy"):
        e = make_engine(options, inputs)
        fill, steps = split_fill(inputs.steps, window_of(options))
        for part in fill:
            for c in part.batches(1000):
                e.publish_batch(c)
        e.subscribe_batch(inputs.subscriptions)
        e.subscribe_batch(inputs.others)
        if name == "before":
            e.subscribe(Subscription(-1, 0.0, 0.0, 1, 0.5, terms={inputs.vocabulary.term(0): 1.0}))
            e.unsubscribe(-1)
            e.query("range", rect=inputs.bounds.as_tuple(), last=1e-300)
        engines[name] = e
    assert engines["before"].stats()["core_window"] == "kept" != engines["lazy"].stats()["core_window"]
    before = {name: (work_counts(e), e.stats()["queries"]["kinds"]["range"]) for name, e in engines.items()}
    cpu = dict.fromkeys(engines, 0.0)
    n = 0
    chunks = [c for op, payload in steps for c in payload.batches(batch)]
    for i, c in enumerate(chunks):
        logs = {}
        for name in (list(engines) if i % 2 == 0 else list(engines)[::-1]):
            c0 = time.process_time()
            log = engines[name].publish_batch(c)
            cpu[name] += time.process_time() - c0
            logs[name] = log
        a, b = logs["before"], logs["lazy"]
        assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("at", "sub", "msg", "entered"))
        n += len(c)
    out: dict = {"messages": n}
    for name, e in engines.items():
        w0, k0 = before[name]
        w1, k1 = work_counts(e), e.stats()["queries"]["kinds"]["range"]
        out[name] = {"amp_us": round((w1["arrival_us"] - w0["arrival_us"]) / (w1["arrivals"] - w0["arrivals"]), 3),
                     "emp_us": round((w1["expiry_us"] - w0["expiry_us"]) / (w1["expirations"] - w0["expirations"]), 3),
                     "range_us": round((k1["time_s"] - k0["time_s"]) / n * 1e6, 3),
                     "cpu_us": round(cpu[name] / n * 1e6, 3), "matches": k1["matches"] - k0["matches"]}
    return out


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
        e.subscribe_batch(specs)
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
    p.add_argument("--paired-lazy", action="store_true",
                   help="instead: the default index with and without the windows a range-only stream "
                        "does not read (top-k core's, ALL_TERM tree), interleaved, same matches asserted")
    a = p.parse_args(argv)
    if a.continuous:
        print(json.dumps(continuous_100k(100_000, 100_000, a.measured), indent=1))
        return 0
    tmp = tempfile.TemporaryDirectory() if a.workdir is None else None
    folder = Path(a.workdir or tmp.name)  # type: ignore[union-attr]
    folder.mkdir(parents=True, exist_ok=True)
    if a.paired_lazy:
        for match in a.match.split(","):
            m, s = workload(folder, match, a.seed, a.subs, a.window, a.measured)
            print(json.dumps({"match": match, **paired_lazy(m, s, a.window)}), flush=True)
        return 0
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
    print(f"{'match':6} {'index':8} {'AMP':>7} {'EMP':>7} {'range':>7} {'CPU':>7} {'matches/msg':>12}")
    for match in a.match.split(","):
        for index in a.index.split(","):
            sel = [f for f in runs if f["match"] == match and f["index"] == index]
            med = {key: statistics.median(f[key] for f in sel) for key in ("amp_us", "emp_us", "range_us", "cpu_us")}
            print(f"{match:6} {index:8} {med['amp_us']:7.2f} {med['emp_us']:7.2f} {med['range_us']:7.2f} {med['cpu_us']:7.2f} "
                  f"{sel[0]['matches'] / sel[0]['messages']:12.1f}")
    if a.json:
        Path(a.json).write_text(json.dumps(runs, indent=1) + "\n")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
