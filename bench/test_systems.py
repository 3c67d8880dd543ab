"""The systems side by side (issue 5): IGPT-cSkyband (Skype), IGPT-Skyband, IGPT-Kmax,
IPT-cSkyband, CIQ-Kmax and the reference engine, on tweets and geonames.

Every run follows the paper's protocol (the harness's ``prepare``): the first ``window``
messages fill the window, the subscriptions register into it in one batch (in bulk), and only
the messages after that are timed; ``extra_info`` carries ``subscribe_s`` (the registration
time), ``fill_s`` and ``bulk_fallbacks``.

    pytest bench/test_systems.py --benchmark-autosave
    pytest bench/test_systems.py --benchmark-compare        # against the last saved run
    pytest bench/test_systems.py --size paper -k "Skype and tweets"   # 1M subscriptions, 1M window
"""

import pytest

from conftest import run_steady_state, spec_for

SYSTEMS = {
    "Skype(blocks-cSkyband)": dict(index="blocks", buffer="cskyband"),
    "Skype(IGPT-cSkyband)": dict(index="igpt", buffer="cskyband"),
    "IGPT-Skyband": dict(index="igpt", buffer="skyband"),
    "IGPT-Kmax": dict(index="igpt", buffer="kmax"),
    "IPT-cSkyband": dict(index="ipt", buffer="cskyband"),
    "CIQ-Kmax": dict(index="ciq", buffer="kmax"),
    "reference": dict(engine="reference"),
}


@pytest.mark.parametrize("dataset", ["tweets", "geonames"])
@pytest.mark.parametrize("system", list(SYSTEMS))
def test_system(benchmark, size, dataset, system):
    if size == "paper" and system == "reference":
        pytest.skip("the brute-force reference cannot hold 1M subscriptions over a 1M window")
    benchmark.group = f"systems-{dataset}-{size}"
    run_steady_state(benchmark, spec_for(size, dataset=dataset, **SYSTEMS[system]))
