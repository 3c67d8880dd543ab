"""SSTD's load adjustment (Chen et al., PVLDB 2020, §4): PM, then FM, then FG.

Trigger: imbalance ``max/mean > lam`` (the paper uses ``L_max / L_min > lambda``; see
:mod:`skype.partitioning.rebalance.ps2stream` for why the mean).  Only subscriptions move
(messages are not stored by the layer).  Escalation, stopping at the first step that meets lam:

* **PM** (partial migration): the leaves (units) of the most and the least loaded partitions are
  split in two by Karmarkar-Karp, and the two subsets are matched to the two partitions by the
  Hungarian assignment, minimising the bytes that change partition.
* **FM** (full migration): all leaves are split into P subsets by Karmarkar-Karp and matched to the
  partitions the same way (``scipy.optimize.linear_sum_assignment``, Jonker-Volgenant).
* **FG** (fine-grained): the paper splits the most loaded leaf (and merges cold siblings), then
  runs FM.  Leaves here are fixed at build time, so FG is FM restricted to the leaves that carry
  load, with the heaviest leaf's partition left alone when it is a single leaf heavier than the
  mean: a leaf cannot be cut at runtime (not implemented: the tree change itself).

Each step's plan is kept only if it lowers the imbalance; FM and FG are tried only when PM does
not reach lam.  ``cost_estimate`` is the transfer cost of the assignment, ``sum |P.Q|`` over the
leaves that change partition (subscriptions moved).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from skype.partitioning.numberpart import karmarkar_karp
from skype.partitioning.rebalance.base import LoadModel, Plan, empty_plan


def assign_subsets(bins: np.ndarray, units: np.ndarray, owner: np.ndarray, weight: np.ndarray,
                   partitions: np.ndarray) -> np.ndarray:
    """Match subset j (``bins == j``) to one of ``partitions`` minimising the weight that leaves
    its current partition; returns the destination of every unit.

    >>> assign_subsets(np.array([0, 0, 1]), np.arange(3), np.array([5, 5, 7]), np.ones(3), np.array([5, 7])).tolist()
    [5, 5, 7]
    """
    k = len(partitions)
    cost = np.zeros((k, k))
    for j in range(k):
        sel = bins == j
        total = weight[units[sel]].sum()
        for i, p in enumerate(partitions):
            cost[j, i] = total - weight[units[sel & (owner[units] == p)]].sum()
    rows, cols = linear_sum_assignment(cost)
    dest_of_bin = np.empty(k, np.int64)
    dest_of_bin[rows] = partitions[cols]
    return dest_of_bin[bins]


def _reassign(model: LoadModel, units: np.ndarray, partitions: np.ndarray) -> None:
    weights = model.subs[units] * model.rate[model.owner[units]]
    bins = karmarkar_karp(weights, len(partitions))
    dest = assign_subsets(bins, units, model.owner, model.subs, partitions)
    for p in partitions:
        model.move(units[dest == p], int(p))


def decide(snapshot: dict, *, lam: float = 1.05, max_fraction: float = 0.1, horizon: float = 0.0) -> Plan:
    base = LoadModel(snapshot, horizon)
    before = base.imbalance()
    if before <= lam:
        return empty_plan("sstd", before)
    best: Plan | None = None
    for step in ("PM", "FM", "FG"):
        model = LoadModel(snapshot, horizon)
        if step == "PM":
            pair = np.array([int(np.argmax(model.loads)), int(np.argmin(model.loads))])
            units = np.flatnonzero(np.isin(model.owner, pair) & (model.subs > 0))
            _reassign(model, units, pair)
        else:
            units = np.flatnonzero(model.subs > 0)
            if step == "FG":
                heavy = model.subs * model.rate[model.owner] > model.loads.mean()
                units = units[~heavy[units]]
                partitions = np.setdiff1d(np.arange(model.num_partitions), model.owner[heavy])
            else:
                partitions = np.arange(model.num_partitions)
            if len(partitions) == 0:
                continue
            _reassign(model, units, partitions)
        model.operations.append(step)
        if model.moved_fraction() > max_fraction:
            continue
        plan = model.plan("sstd", before, 0.0)
        plan.cost_estimate = float(plan.subscriptions)
        if plan.imbalance_after < before and (best is None or plan.imbalance_after < best.imbalance_after):
            best = plan
        if best is not None and best.imbalance_after <= lam:
            break
    return best if best is not None else empty_plan("sstd", before)
