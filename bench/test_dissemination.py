"""Message dissemination: AMP, candidates verified per affected subscription, and index bytes
per subscription for the block index (the default), IGPT, IPT, CIQ and the reference, on
tweets and geonames.

    pytest bench/test_dissemination.py [--size medium|paper] [--benchmark-autosave]
"""

import pytest

from conftest import run_steady_state, spec_for

INDEXES = {"blocks": dict(index="blocks"), "IGPT": dict(index="igpt"), "IPT": dict(index="ipt"), "CIQ": dict(index="ciq"),
           "reference": dict(engine="reference")}


@pytest.mark.parametrize("dataset", ["tweets", "geonames"])
@pytest.mark.parametrize("index", list(INDEXES))
def test_amp(benchmark, size, dataset, index):
    benchmark.group = f"dissemination-{dataset}-{size}"
    spec = spec_for(size, dataset=dataset, buffer="cskyband", **INDEXES[index])
    m = run_steady_state(benchmark, spec)
    # the figures describe the run they claim to: every measured message arrived (and expired
    # one: the window was full), and for the indexes some reached subscriptions, each affected
    # subscription costing at least one verified candidate
    assert m["messages"] == spec.measured
    assert m["amp_us"] > 0 and m["emp_us"] > 0
    if index != "reference":  # the reference does not count candidates
        assert m["affected_per_msg"] > 0 and m["candidates_per_affected"] >= 1.0 and m["index_bytes_per_sub"] > 0
