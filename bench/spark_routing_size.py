"""What the DSkype Spark job ships to its routing tasks, per distribution method, at a given scale.

For each method the distribution is built exactly as ``python -m skype.run distributed`` builds
it (:func:`skype.dskype.plan.build_distribution_for`), then measured three ways:

* ``pickled_distribution``: the distribution as built (what the ``mapInArrow`` closure used to
  carry: it holds the subscription table, so it grows with the subscriptions);
* ``routing_tables``: :func:`skype.dskype.routing.routing_copy`, the compact tables the job now
  broadcasts once per executor (metrics key ``routing_table_bytes``);
* ``closure``: the ``mapInArrow`` function with a broadcast handle, as Spark pickles it (metrics
  key ``routing_bytes``), measured with a stand-in broadcast object of the same pickled form
  (an id), so no JVM is needed.

No Spark session is started.  Usage::

    python bench/spark_routing_size.py --num-subs 1000000 --partitions 8 [--dataset tweets]
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from functools import partial


class _Handle:
    """Pickles like pyspark's Broadcast: by id."""

    def __init__(self, bid: int) -> None:
        self.id = bid

    def __reduce__(self):
        return (_Handle, (self.id,))


def main(argv: list[str] | None = None) -> int:
    from pyspark import cloudpickle

    from skype.dskype.plan import RunSettings
    from skype.simulate import load_inputs
    from skype.partitioning import METHODS
    from skype.run import build_parser
    from skype.dskype.routing import ShippedRouters, route_arrow, routing_copy
    from skype.dskype.plan import build_distribution_for

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-subs", type=int, default=100_000)
    p.add_argument("--num-messages", type=int, default=20_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--dataset", default="tweets")
    p.add_argument("--methods", default=",".join(METHODS))
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    args = build_parser().parse_args(["distributed", "--dataset", a.dataset, "--num-subs", str(a.num_subs),
                                      "--num-messages", str(a.num_messages), "--window", "10000",
                                      "--partitions", str(a.partitions)])
    inputs = load_inputs(vars(args))
    print(f"# workload {a.dataset}, {a.num_subs:,} subscriptions, loaded in {time.perf_counter() - t0:.0f} s")
    rows = []
    for method in a.methods.split(","):
        args.method = (method,)
        settings = RunSettings.from_options(vars(args), inputs.bounds)
        t = time.perf_counter()
        dist = build_distribution_for(settings, method, inputs)
        built = time.perf_counter() - t
        compact = routing_copy(dist)
        closure = partial(route_arrow, ShippedRouters(_Handle(1), [list(range(a.partitions))]),
                          bounds=tuple(settings.distribution.bounds), dead_letters="/shared/run/dead-letters")
        row = {"method": method, "subscriptions": a.num_subs, "partitions": a.partitions,
               "pickled_distribution": len(pickle.dumps(dist, protocol=pickle.HIGHEST_PROTOCOL)),
               "routing_tables": len(pickle.dumps(compact, protocol=pickle.HIGHEST_PROTOCOL)),
               "closure": len(cloudpickle.dumps(closure)), "build_s": round(built, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
