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
  runs FM.  On the tree methods (``kdt``, ``qt``; ``cut=True``) the most loaded leaf is cut in two
  (:mod:`skype.partitioning.restructure`; by text, or by space for a leaf not split by text,
  whichever leaves the smaller larger piece; the paper picks with its statistic ĥ), then the next
  most loaded leaf, up to ``max_cuts`` cuts while the heaviest leaf carries more than half the
  mean partition load; then FM, or PM on the most and least loaded partitions when FM would move
  more than ``max_fraction``.  Cold siblings are not merged (units only grow in number).  On the
  cell methods (``agrid``, ``aqwa``) a leaf is a cell and is never cut: FG is FM restricted to
  the units that carry load, with the heaviest unit's partition left alone when it is a single
  unit heavier than the mean.

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


def _fg_cut(model: LoadModel, max_cuts: int) -> None:
    """FG's tree change: cut the most loaded leaves (module docstring)."""
    for _ in range(max_cuts):
        load = model.subs * model.rate[model.owner]
        order = np.argsort(-load, kind="stable")
        for u in order[:8]:
            if load[u] <= model.loads.mean() / 2:
                return
            options = model.cut_options(int(u))
            if options:
                model.cut(int(u), min(options, key=lambda o: max(o[2], o[3])))
                break
        else:
            return


def decide(snapshot: dict, *, lam: float = 1.05, max_fraction: float = 0.1, horizon: float = 0.0,
           measured: bool = False, cut: bool = True, max_cuts: int = 4) -> Plan:
    base = LoadModel(snapshot, horizon, measured)
    before = base.imbalance()
    if before <= lam:
        return empty_plan("sstd", before)
    best: Plan | None = None
    for step in ("PM", "FM", "FG"):
        model = LoadModel(snapshot, horizon, measured)
        if step == "PM":
            pair = np.array([int(np.argmax(model.loads)), int(np.argmin(model.loads))])
            units = np.flatnonzero(np.isin(model.owner, pair) & (model.subs > 0))
            _reassign(model, units, pair)
        else:
            units = np.flatnonzero(model.subs > 0)
            if step == "FG" and cut and model.cuttable:
                _fg_cut(model, max_cuts)
                _reassign(model, np.flatnonzero(model.subs > 0), np.arange(model.num_partitions))
                if model.moved_fraction() > max_fraction:  # FM moves too much: PM after the cuts
                    model = LoadModel(snapshot, horizon, measured)
                    _fg_cut(model, max_cuts)
                    pair = np.array([int(np.argmax(model.loads)), int(np.argmin(model.loads))])
                    _reassign(model, np.flatnonzero(np.isin(model.owner, pair) & (model.subs > 0)), pair)
                    model.operations.append("PM after the cuts")
                partitions = np.zeros(0, np.int64)
            elif step == "FG":
                heavy = model.subs * model.rate[model.owner] > model.loads.mean()
                units = units[~heavy[units]]
                partitions = np.setdiff1d(np.arange(model.num_partitions), model.owner[heavy])
            else:
                partitions = np.arange(model.num_partitions)
            if len(partitions):
                _reassign(model, units, partitions)
            elif step != "FG" or not (cut and model.cuttable):
                continue
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
