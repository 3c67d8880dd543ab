"""Rebalancing policies for the adaptive distribution methods, each its paper's, as pure decisions.

``decide(policy, dist)`` reads a snapshot of the distribution's statistics and returns a
:class:`Plan` (which units move from which partition to which, with the replicas, bytes and
the paper's cost estimate); ``apply_plan(dist, plan)`` carries it out.  Policies:

========== ======================================== ====================================
policy     paper                                    methods
========== ======================================== ====================================
never      the static baseline                      any
tornado    split/merge and shift, C_r > C_t         agrid (rectangles)
ps2stream  Phase I + GR min-cost migration          agrid, kdt, qt, aqwa
sstd       PM -> FM -> FG (Karmarkar-Karp, Hungarian) agrid, kdt, qt, aqwa
aqwa       paired split + merge, time fading        aqwa (kd-tree)
========== ======================================== ====================================

Statistics are folded once per interval with ``FADING[policy]`` (AQWA: halve the old counts;
the others look at the last interval only).

>>> from skype.data import make_workload
>>> from skype.partitioning import build_distribution
>>> w = make_workload("tweets", num_subs=300, num_messages=600, seed=1)
>>> d = build_distribution("agrid", 4, w.subscriptions, w.messages, w.vocabulary, grid=(16, 8))
>>> _ = d.route_messages(w.messages)
>>> decide("never", d).empty
True
"""

from __future__ import annotations

import copy
from typing import TypeVar

import numpy as np

from skype.errors import InputError, invalid_choice
from skype.partitioning.rebalance import aqwa, ps2stream, sstd, tornado
from skype.partitioning.rebalance.base import Plan, empty_plan, imbalance
from skype.partitioning.rebalance.measured import with_partition_loads
from skype.partitioning.restructure import cut_snapshot, cut_unit
from skype.partitioning.units import UnitDistribution

D = TypeVar("D", bound=UnitDistribution)
POLICIES = ("never", "tornado", "ps2stream", "sstd", "aqwa")
COMPATIBLE = {
    "never": ("agrid", "kdt", "qt", "aqwa"),
    "tornado": ("agrid",),
    "ps2stream": ("agrid", "kdt", "qt", "aqwa"),
    "sstd": ("agrid", "kdt", "qt", "aqwa"),
    "aqwa": ("aqwa",),
}
PAPER_POLICY = {"agrid": "tornado", "kdt": "ps2stream", "qt": "sstd", "aqwa": "aqwa"}
FADING = {"never": 0.0, "tornado": 0.0, "ps2stream": 0.0, "sstd": 0.0, "aqwa": 0.5}


def check_policy(policy: str, method: str) -> None:
    if policy not in POLICIES:
        raise invalid_choice("rebalancing policy", policy, POLICIES)
    if policy != "never" and method not in COMPATIBLE[policy]:
        raise InputError("E023", what=f"the method of policy {policy!r}", expected=f"one of {list(COMPATIBLE[policy])}",
                         value=method)


def snapshot(dist: UnitDistribution) -> dict:
    snap = dist.statistics()
    tree = getattr(dist, "tree", None)
    if tree is not None:
        snap["tree"] = tree
    if dist.capabilities.cuttable:
        snap.update(cut_snapshot(dist), cuttable=True)
    return snap


def decide(policy: str, dist, partition_loads=None, **params) -> Plan:
    """The policy's plan for the distribution's current statistics (nothing is changed).
    ``partition_loads``: measured loads per partition to plan with instead of the model's
    (:mod:`skype.partitioning.rebalance.measured`)."""
    if policy == "never":
        return empty_plan("never")
    if not isinstance(dist, UnitDistribution):
        raise InputError("E023", what="the distribution of a rebalancing policy",
                         expected="an adaptive method (agrid, kdt, qt, aqwa)", value=getattr(dist, "name", dist))
    check_policy(policy, dist.name)
    snap = snapshot(dist)
    if partition_loads is not None:
        snap = with_partition_loads(snap, partition_loads)
    module = {"tornado": tornado, "ps2stream": ps2stream, "sstd": sstd, "aqwa": aqwa}[policy]
    return module.decide(snap, **params)


def apply_plan(dist: UnitDistribution, plan: Plan) -> tuple[int, int]:
    """Carry out a plan; returns the (replicas, bytes) moved."""
    if plan.empty:
        return 0, 0
    if plan.structure is not None and plan.structure[0] == "cuts":
        for unit, kind, at in plan.structure[1]:  # the cuts first, then the moves (numbered after them)
            cut_unit(dist, unit, kind, at)
        return dist.move_units(plan.units, plan.destinations)
    if plan.structure is not None:
        return dist.split_and_merge(list(plan.structure))  # type: ignore[attr-defined]
    return dist.move_units(plan.units, plan.destinations)


def calibrate(dist: D, sample, policy: str, rounds: int = 4, **params) -> D:
    """Build-time refinement: route the sample, let ``policy`` move units (no migration budget:
    nothing is running yet) for up to ``rounds`` rounds; returns the state (a copy, for methods
    with a tree) that measured the lowest imbalance on the sample, with clear statistics."""
    if sample is None or len(sample) == 0:
        return dist
    best, best_imbalance = dist, np.inf
    for step in range(rounds + 1):
        dist.reset_statistics()
        dist.route_messages(sample)
        measured = imbalance(dist.partition_cost())
        if measured < best_imbalance:
            best, best_imbalance = copy.deepcopy(dist), measured
        if step == rounds:
            break
        plan = decide(policy, dist, **params)
        if plan.empty:
            break
        apply_plan(dist, plan)
    best.reset_statistics()
    best.pop_new_live_terms()
    return best


__all__ = ["calibrate", "COMPATIBLE", "FADING", "PAPER_POLICY", "POLICIES", "Plan", "apply_plan", "check_policy", "decide",
           "imbalance", "snapshot"]
