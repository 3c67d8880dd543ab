"""The tweets generator's memory (issue 35: the process outside the engine): the streamed
workload's set-up (vocabulary, block states) and its subscriptions, each with tracemalloc's
peak (numpy and Python objects), the RSS after it (untrimmed) and the process's VmHWM.

    python bench/generator_memory.py --num-subs 1000000 --num-messages 3000000
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc


def status_mb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) >> 10
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-subs", type=int, default=1_000_000)
    p.add_argument("--num-messages", type=int, default=3_000_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    tracemalloc.start()
    from skype.data.streaming import TweetsStream

    t = time.process_time()
    out = {"imports_rss_mb": status_mb("VmRSS")}
    stream = TweetsStream(args.num_messages, args.seed)
    now, peak = tracemalloc.get_traced_memory()
    out["stream"] = {"traced_mb": now >> 20, "traced_peak_mb": peak >> 20, "rss_mb": status_mb("VmRSS"),
                     "hwm_mb": status_mb("VmHWM"), "cpu_s": round(time.process_time() - t, 1)}
    tracemalloc.reset_peak()
    subs = stream.subscriptions(args.num_subs)
    now, peak = tracemalloc.get_traced_memory()
    out["subscriptions"] = {"count": len(subs), "traced_mb": now >> 20, "traced_peak_mb": peak >> 20,
                            "rss_mb": status_mb("VmRSS"), "hwm_mb": status_mb("VmHWM"),
                            "cpu_s": round(time.process_time() - t, 1)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
