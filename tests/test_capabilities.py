"""The capability table (skype.partitioning.capabilities) says what each built method does."""

import numpy as np
import pytest

from skype.data import make_workload
from skype.dskype.handover import routes_everywhere
from skype.dskype.plan import single_replica
from skype.errors import InputError
from skype.partitioning import CAPABILITIES, METHODS, build_distribution, capabilities_of, estimate_thresholds
from skype.partitioning.ranges import PrefixDistribution
from skype.partitioning.restructure import CUTTABLE
from skype.partitioning.units import UnitDistribution


def test_every_method_has_one_row():
    assert sorted(CAPABILITIES) == sorted(METHODS)
    with pytest.raises(InputError, match="E022"):
        capabilities_of("nope")


@pytest.fixture(scope="module")
def workload():
    w = make_workload("tweets", num_subs=400, num_messages=600, seed=3)
    theta = estimate_thresholds(w.subscriptions, w.messages, w.vocabulary, window=300)
    return w, theta


@pytest.mark.parametrize("method", METHODS)
def test_the_row_matches_what_the_built_method_does(method, workload):
    w, theta = workload
    dist = build_distribution(method, 4, w.subscriptions, w.messages, w.vocabulary, theta)
    caps = dist.capabilities
    assert caps is CAPABILITIES[method]
    counts = dist.route_subscriptions(w.subscriptions, theta).counts()
    if not caps.replicated:
        assert (np.asarray(counts) == 1).all()  # one partition per subscription: no merge stage
    else:
        assert (np.asarray(counts) > 1).any()  # the row would wrongly skip the merge otherwise
    assert single_replica(dist) == (not caps.replicated)
    assert routes_everywhere(dist) == caps.routes_everywhere == isinstance(dist, UnitDistribution)
    assert caps.activation == isinstance(dist, PrefixDistribution) == (method == "prefix")
    assert caps.adaptive == caps.routes_everywhere
    assert (method in CUTTABLE) == caps.cuttable
    assert caps.kinds or caps.kinds_with_terms  # every method serves some kind beside topk
