"""Shared fixtures: small seeded workloads and a brute-force oracle over a final window."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tweets_small():
    from skype.data import make_workload

    return make_workload("tweets", num_subs=300, num_messages=1500, seed=3)


@pytest.fixture(scope="session")
def geonames_small():
    from skype.data import make_workload

    return make_workload("geonames", num_subs=300, num_messages=1500, seed=5)


def brute_force_topk(subs, window, max_dist):
    """{sub id: [(msg id, score), ...]} by direct scoring of every (subscription, message) pair
    with skype.reference.score; ``window`` is a MessageBatch, oldest first."""
    from skype.reference import score

    msgs = []
    for j in range(len(window)):
        ids, ws = window.terms.row(j)
        msgs.append((j, int(window.ids[j]), float(window.x[j]), float(window.y[j]),
                     {int(t): float(w) for t, w in zip(ids, ws)}))
    out = {}
    for i in range(len(subs)):
        ids, ws = subs.terms.row(i)
        terms = [(int(t), float(w)) for t, w in zip(ids, ws)]
        scored = []
        for seq, mid, x, y, mt in msgs:
            sc = score(terms, float(subs.alpha[i]), float(subs.x[i]), float(subs.y[i]), mt, x, y, max_dist)
            if sc is not None:
                scored.append((-sc, -seq, mid, sc))
        scored.sort()
        out[int(subs.ids[i])] = [(mid, sc) for _, _, mid, sc in scored[: int(subs.k[i])]]
    return out


def assert_same_topk(got, want, context=""):
    """Equal top-k lists: same ids in the same order, scores equal to the last bit."""
    assert set(got) == set(want), context
    for sid in want:
        g = [(m.id, m.score) if hasattr(m, "id") else tuple(m) for m in got[sid]]
        w = [tuple(m) if not hasattr(m, "id") else (m.id, m.score) for m in want[sid]]
        assert g == w, f"{context} subscription {sid}: got {g}, want {w}"


def finite(x: float) -> bool:
    return math.isfinite(x)


# Spark: the one SparkSession of a test run (tests/spark_fixtures.py; skips without pyspark)
from spark_fixtures import spark  # noqa: E402,F401
