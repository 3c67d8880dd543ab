"""Every range cut of ``prefix`` on the Spark runtime, checked without a JVM (the job's code under
``TwsTester``): the ``work`` cut (``skype.partitioning.ranges``) moves the range boundaries, and
the runtime's activation and summaries must stay exact under them.  Against the centralized
engine and the independent oracle after every micro-batch, on a stream with subscribes,
unsubscribes and a re-subscription mid-stream."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from spark_fixtures import (  # noqa: E402
    LocalPipeline, centralized_by_batch, events_workload, first_difference, oracle_by_batch, oracle_check,
)

from skype.simulate import load_inputs  # noqa: E402
from skype.run import build_parser  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("cut", ["work", "bisection"])
def test_spark_prefix_is_exact_under_every_range_cut(tmp_path, cut):
    from skype.dskype.plan import RunSettings

    events = events_workload(tmp_path / "events.jsonl", dataset="tweets", num_messages=1200, k=3)
    window, batch = 600, 100
    args = build_parser().parse_args(["distributed", "--events", str(events), "--window", str(window), "--method",
                                      "prefix", "--partitions", "4", "--batch-size", str(batch), "--range-cut", cut])
    inputs = load_inputs(vars(args))
    settings = RunSettings.from_options(vars(args), inputs.bounds)
    want = centralized_by_batch(inputs, settings.window.centralized(), batch)
    pipe = LocalPipeline(tmp_path / "run", settings, inputs)
    starts = pipe.plan.pipelines[0].distribution.starts
    assert len(set(starts.tolist())) > 2, "the cut must give several non-empty ranges"
    for b, (oracle, live) in enumerate(oracle_by_batch(inputs, {"window": window}, batch)):
        got = pipe.step()
        assert got == want[b], f"{cut} batch {b}: {first_difference(got, want[b])}"
        oracle_check(oracle, got, live, f"{cut} batch {b}")
    assert pipe.final_results() == want[-1], f"{cut} final results"
