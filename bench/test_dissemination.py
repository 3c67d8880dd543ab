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
    m = run_steady_state(benchmark, spec_for(size, dataset=dataset, buffer="cskyband", **INDEXES[index]))
    assert m["messages"] > 0
