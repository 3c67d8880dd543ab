"""Tornado's incremental rebalancing of the A-Grid (Mahmood et al. §4.2): split/merge and shift.

Every partition of an ``agrid`` distribution is a rectangle of cells, and stays one: each
operation below maps rectangles to rectangles.  With ``cost(R)`` the planned load of a cell
rectangle (its replicas times the message rate of the partition holding it, see
:mod:`skype.partitioning.rebalance.base`):

* **split/merge**: the most loaded partition X is cut in two (X1, X2) where the larger half is
  smallest (§4.3's best split from row and column aggregates); two adjacent partitions Y, Z
  whose union is a rectangle merge (Z's cells go to Y) and the freed partition takes X2.
  ``C_r = cost(X) - max(cost(X1), cost(X2), cost(Y) + cost(Z))`` (Eq. 4),
  ``C_t = beta * (queryCount(X2) + queryCount(Z))`` (Eq. 5).
* **shift**: X gives a strip of rows or columns along a full shared side to the adjacent
  partition B; every strip width is evaluated exactly (the paper estimates the coordinate with
  ``d = cost(A) - (cost(A) + cost(B)) / 2`` and lets the evaluators find it).
  ``C_r = cost(X) - max(cost(X'), cost(B'))``, ``C_t = beta * queryCount(strip)``.
* The operation with the largest ``C_r`` with ``C_r > C_t`` is taken; then the next, up to
  ``max_ops``, while the imbalance is above ``trigger``.

``beta`` is the time to move one query, here in load units: moving one subscription costs
``beta`` times the average load per replica (the work of one subscription over one interval).
Corner shifts (neighbours that do not share a whole side) are not implemented.
"""

from __future__ import annotations

import numpy as np

from skype.partitioning.agrid import owner_rects
from skype.partitioning.rebalance.base import LoadModel, Plan, empty_plan
from skype.partitioning.rects import Rect, best_cut, prefix_grid, rect_cells, rect_sum, split_rect


def _area(r: Rect) -> int:
    return (r[2] - r[0]) * (r[3] - r[1])


def _union(a: Rect, b: Rect) -> Rect | None:
    """The union of two rectangles when it is a rectangle (they share a whole side)."""
    if a[1] == b[1] and a[3] == b[3] and (a[2] == b[0] or b[2] == a[0]):
        return (min(a[0], b[0]), a[1], max(a[2], b[2]), a[3])
    if a[0] == b[0] and a[2] == b[2] and (a[3] == b[1] or b[3] == a[1]):
        return (a[0], min(a[1], b[1]), a[2], max(a[3], b[3]))
    return None


def _strips(x: Rect, b: Rect) -> list[Rect]:
    """Strips of X along its whole side shared with B (B gets the strip and stays a rectangle)."""
    out = []
    if x[1] == b[1] and x[3] == b[3]:
        if b[0] == x[2]:
            out = [(x[2] - w, x[1], x[2], x[3]) for w in range(1, x[2] - x[0])]
        elif b[2] == x[0]:
            out = [(x[0], x[1], x[0] + w, x[3]) for w in range(1, x[2] - x[0])]
    if x[0] == b[0] and x[2] == b[2]:
        if b[1] == x[3]:
            out = [(x[0], x[3] - w, x[2], x[3]) for w in range(1, x[3] - x[1])]
        elif b[3] == x[1]:
            out = [(x[0], x[1], x[2], x[1] + w) for w in range(1, x[3] - x[1])]
    return out


def decide(snapshot: dict, *, trigger: float = 1.1, beta: float = 0.2, max_ops: int = 16,
           horizon: float = 0.0, measured: bool = False) -> Plan:
    model = LoadModel(snapshot, horizon, measured)
    before = model.imbalance()
    if before <= trigger:
        return empty_plan("tornado", before)
    nx, ny = snapshot["grid"]
    S = prefix_grid(model.subs, nx, ny)
    per_replica = model.loads.sum() / max(model.subs.sum(), 1.0)
    cost_total = 0.0
    for _ in range(max_ops):
        if model.imbalance() <= trigger:
            break
        rects = owner_rects(model.owner, nx, model.num_partitions)
        loads, rate = model.loads, model.rate
        x = int(np.argmax(loads))
        best: tuple[float, float, list[tuple[Rect, int]], str] | None = None  # (C_r, C_t, moves, label)

        def consider(c_r: float, c_t: float, moves: list[tuple[Rect, int]], label: str) -> None:
            nonlocal best
            if c_r > c_t and (best is None or c_r > best[0]):
                best = (c_r, c_t, moves, label)

        cut = best_cut(S, rects[x]) if _area(rects[x]) > 1 else None
        if cut is not None:
            x1, x2 = split_rect(rects[x], cut[0], cut[1])
            n1, n2 = rect_sum(S, x1), rect_sum(S, x2)
            free = [p for p in range(model.num_partitions) if _area(rects[p]) == 0]
            if free:
                f = free[0]
                consider(loads[x] - max(n1 * rate[x], n2 * rate[f]), beta * per_replica * n2,
                         [(x2, f)], f"split {x}->{f}")
            for y in range(model.num_partitions):
                for z in range(model.num_partitions):
                    if len({x, y, z}) < 3 or _area(rects[y]) == 0 or _area(rects[z]) == 0:
                        continue
                    if _union(rects[y], rects[z]) is None:
                        continue
                    nz = rect_sum(S, rects[z])
                    merged = loads[y] + nz * rate[y]
                    c_r = loads[x] - max(n1 * rate[x], n2 * rate[z], merged)
                    consider(c_r, beta * per_replica * (n2 + nz), [(rects[z], y), (x2, z)], f"split {x} merge {z}->{y}")
        for b in range(model.num_partitions):
            if b == x or _area(rects[b]) == 0:
                continue
            for strip in _strips(rects[x], rects[b]):
                ns = rect_sum(S, strip)
                c_r = loads[x] - max(loads[x] - ns * rate[x], loads[b] + ns * rate[b])
                consider(c_r, beta * per_replica * ns, [(strip, b)], f"shift {x}->{b}")
        if best is None:
            break
        c_r, c_t, moves, label = best
        for rect, dest in moves:
            model.move(rect_cells(rect, nx), dest)
        model.operations.append(f"{label} (C_r {c_r:.3g} > C_t {c_t:.3g})")
        cost_total += c_t
    plan = model.plan("tornado", before, cost_total)
    return plan if plan.imbalance_after < before else empty_plan("tornado", before)
