"""PS2Stream's local load adjustment (Chen et al. §V-A): Phase I, then GR min-cost migration.

Trigger: the imbalance ``max/mean`` exceeds ``sigma`` (the paper bounds ``L_max / L_min``; with
dozens of partitions the minimum is noisy, so the mean is used).  The most loaded partition
``w_o`` hands whole units (gridt cells with their subscriptions) to the least loaded ``w_l``:

* **Phase I**: a text unit of ``w_o`` whose region ``w_l`` also holds (a sibling term range)
  moves first when that lowers ``max(L_o, L_l)``: merging text siblings on one worker does not
  add a summary region.  Then, on the tree methods (``cut=True``), the paper's text split of a hot
  cell: when the hottest unit of ``w_o`` carries at least half the gap (so that GR cannot move it
  whole without overshooting), it is cut in two (:mod:`skype.partitioning.restructure`: by text,
  or by space when its region is a kd leaf not yet split by text, whichever leaves the smaller
  larger piece) and the piece whose move to ``w_l`` lowers ``max(L_o, L_l)`` most moves, if it
  lowers it.
* **Phase II, GR**: with ``tau = (L_o - L_l) / 2`` the load to shed, scan the units of ``w_o`` by
  ascending ``S_g / L_g`` (bytes per unit of load); take units while the load taken stays below
  tau (GS), and among "GS so far + one more unit reaching tau" keep the cheapest (GL).  Units
  too heavy to move without overshooting (``L_g >= L_o - L_l``) are skipped.
* Then the next (most, least) pair, up to ``rounds`` pairs, or until the imbalance is at most
  ``sigma`` or ``max_fraction`` of the replicas moved.

The knapsack DP is not used (the paper's DP ran out of memory; GR is what it recommends).
``cost_estimate`` is the migration cost ``sum S_g`` in bytes.
"""

from __future__ import annotations

import numpy as np

from skype.partitioning.rebalance.base import LoadModel, Plan, empty_plan


def greedy_migration(loads: np.ndarray, sizes: np.ndarray, tau: float, limit: float) -> list[int]:
    """GR: indices of the units to move (module docstring).

    >>> greedy_migration(np.array([5.0, 1, 1, 8]), np.array([5, 1, 2, 1]), 6.0, 10.0)  # one cheap unit reaches tau
    [3]
    >>> greedy_migration(np.array([2.0, 2, 3]), np.array([1, 1, 9]), 5.0, 10.0)  # GS {0, 1}, then the one that crosses
    [0, 1, 2]
    """
    order = np.lexsort((np.arange(len(loads)), sizes / np.maximum(loads, 1e-12)))
    taken: list[int] = []
    acc, best, best_cost = 0.0, None, np.inf
    for g in order:
        load = float(loads[g])
        if load <= 0 or load >= limit:
            continue
        if acc + load < tau:
            taken.append(int(g))
            acc += load
        else:
            cost = float(sizes[taken].sum() + sizes[g]) if taken else float(sizes[g])
            if cost < best_cost:
                best, best_cost = taken + [int(g)], cost
    return best if best is not None else taken


def phase1_cut(model: LoadModel, w_o: int, w_l: int) -> bool:
    """Phase I's split of the hottest unit of ``w_o`` (module docstring); True if it cut and moved."""
    units = np.flatnonzero((model.owner == w_o) & (model.subs > 0))
    if len(units) == 0:
        return False
    u = int(units[np.argmax(model.subs[units])])
    loads = model.loads
    gap, peak = loads[w_o] - loads[w_l], max(loads[w_o], loads[w_l])
    if model.subs[u] * model.rate[w_o] < gap / 2:
        return False  # GR can move whole units
    now, planned = max(model.present[u], 1.0), model.subs[u]
    if model.union is not None:
        rate_l = model.union.rate_with(w_l, np.array([u]))
    else:
        rate_l = max(model.rate[w_l], float(model.mass[u]))
    best = None
    for option in model.cut_options(u):
        a, b = planned * option[2] / now, planned * option[3] / now
        for piece, x in ((0, a), (1, b)):
            after = max((model.replicas[w_o] + a + b - planned - x) * model.rate[w_o], (model.replicas[w_l] + x) * rate_l)
            if after < peak and (best is None or after < best[0]):
                best = (after, option, piece)
    if best is None:
        return False
    new = model.cut(u, best[1])
    model.move(np.array([u if best[2] == 0 else new]), w_l)
    model.operations.append(f"phase1 cut: piece {best[2]} {w_o}->{w_l}")
    return True


def decide(snapshot: dict, *, sigma: float = 1.05, rounds: int | None = None, max_fraction: float = 0.05,
           horizon: float = 0.0, measured: bool = False, cut: bool = True) -> Plan:
    model = LoadModel(snapshot, horizon, measured)
    before = model.imbalance()
    if before <= sigma:
        return empty_plan("ps2stream", before)
    rounds = rounds or model.num_partitions
    for _ in range(rounds):
        if model.imbalance() <= sigma or model.moved_fraction() >= max_fraction:
            break
        w_o, w_l = int(np.argmax(model.loads)), int(np.argmin(model.loads))
        gap = model.loads[w_o] - model.loads[w_l]
        units = np.flatnonzero((model.owner == w_o) & (model.subs > 0))
        if len(units) == 0 or gap <= 0:
            break
        moved = False
        # Phase I: text siblings of a region w_l also holds
        shared = np.isin(model.region[units], model.region[model.owner == w_l])
        for u in units[shared]:
            if model.cost(np.array([u]), w_l) < gap:
                model.move(np.array([u]), w_l)
                model.operations.append(f"phase1 unit {u}: {w_o}->{w_l}")
                moved = True
                gap = model.loads[w_o] - model.loads[w_l]
        if cut and phase1_cut(model, w_o, w_l):
            moved = True
            gap = model.loads[w_o] - model.loads[w_l]
        units = np.flatnonzero((model.owner == w_o) & (model.subs > 0))
        fits = np.array([model.cost(np.array([u]), w_l) < gap for u in units], bool)
        units = units[fits]  # a unit whose terms would flood w_l is no candidate
        unit_loads = model.subs[units] * model.rate[w_o]
        pick = greedy_migration(unit_loads, model.bytes[units].astype(np.float64), gap / 2, gap)
        if pick:
            peak = max(model.loads[w_o], model.loads[w_l])
            state = model.save()
            model.move(units[pick], w_l)
            if max(model.loads[w_o], model.loads[w_l]) >= peak:  # the estimate says no gain: undo, stop
                model.restore(state)
                break
            model.operations.append(f"gr {len(pick)} units: {w_o}->{w_l}")
            moved = True
        if not moved:
            break
    plan = model.plan("ps2stream", before, 0.0)
    plan.cost_estimate = float(plan.bytes)
    return plan if plan.imbalance_after < before else empty_plan("ps2stream", before)
