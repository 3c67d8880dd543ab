"""Tornado's incremental rebalancing of the A-Grid (Mahmood et al. §4.2): split/merge and shift.

Every partition of an ``agrid`` distribution starts as a rectangle of cells; split/merge and
the whole-side shift map rectangles to rectangles (corner shifts do not: see below).  With ``cost(R)`` the planned load of a cell
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
  ``max_ops``, while the imbalance is above ``trigger``.  With measured rates (``measured=True``,
  see :mod:`skype.partitioning.rebalance.rates`) the best few candidates of each operation and
  destination are costed again by trying them on the load model, whose rates then follow the
  summaries.

* **corner shift** (``corner=True``): X gives any neighbour B (a partition owning a cell next to
  one of X's, up to 8 for rectangles, whole side shared or not) the band of X's cells within
  w cells of B's, every width w evaluated exactly (X keeps at least its farthest layer);
  ``C_r`` and ``C_t`` as for a shift.  Along a whole shared side the band is the strip of the
  plain shift; along part of a side X keeps a notch.

``beta`` is the time to move one query, here in load units: moving one subscription costs
``beta`` times the average load per replica (the work of one subscription over one interval).

After a corner shift a partition is a union of rectangles, no longer one (Tornado's evaluators
keep one rectangle in PM; routing here goes by the keyword summaries, which do not need it).  So
every operation moves only the cells the partition owns inside its bounding rectangle, sums are
taken over the owned cells, and a merge takes two partitions that are exact rectangles with a
rectangular union.  With ``corner=False`` no notch ever forms and the operations are the paper's
split/merge and whole-side shift on rectangles.
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


def _bands(owner: np.ndarray, nx: int, ny: int, x: int, rect: Rect, max_width: int = 64) -> dict[int, list[np.ndarray]]:
    """Per neighbour B of X (a partition owning a cell next to one of X's), the bands of X's cells
    within 1, 2, ... cells of B's (4-neighbour steps inside X): the cells a shift to B moves,
    whatever the shapes of X and B (module docstring: corner shifts)."""
    x0, y0, x1, y1 = max(rect[0] - 1, 0), max(rect[1] - 1, 0), min(rect[2] + 1, nx), min(rect[3] + 1, ny)
    grid = owner.reshape(ny, nx)[y0:y1, x0:x1]
    inside = grid == x
    ring = _grow(inside) & ~inside
    ids = (np.arange(y0, y1)[:, None] * nx + np.arange(x0, x1)[None, :])
    out: dict[int, list[np.ndarray]] = {}
    for b in np.unique(grid[ring]):
        cur, taken, bands = grid == b, np.zeros_like(inside), []
        for _ in range(max_width):
            new = _grow(cur) & inside & ~taken
            if not new.any():
                break
            taken |= new
            cur |= new
            bands.append(ids[taken])
        out[int(b)] = bands
    return out


def _grow(mask: np.ndarray) -> np.ndarray:
    out = mask.copy()
    out[1:, :] |= mask[:-1, :]
    out[:-1, :] |= mask[1:, :]
    out[:, 1:] |= mask[:, :-1]
    out[:, :-1] |= mask[:, 1:]
    return out


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


def _apply(model: LoadModel, moves: list, nx: int) -> None:
    for where, src, dest in moves:  # a rectangle or cell ids: only the cells src owns there
        cells = rect_cells(where, nx) if isinstance(where, tuple) else where
        model.move(cells[model.owner[cells] == src], dest)


def _choose(model: LoadModel, cands: list, nx: int, x: int, per_kind: int = 3) -> tuple | None:
    """The candidate with the largest C_r > C_t.  With measured rates (``model.union``), the
    ``per_kind`` candidates of largest estimated C_r of each operation and destination are
    re-costed by trying them on the model: ``C_r = cost(X) - max`` of the new loads of the
    partitions involved, the rates re-measured."""
    if model.union is None:
        fit = [c for c in cands if c[0] > c[1]]
        return max(fit, key=lambda c: c[0]) if fit else None
    best = None
    kept: dict[str, int] = {}
    trials = []
    for cand in sorted(cands, key=lambda c: -c[0]):
        if kept.get(cand[3], 0) < per_kind:
            kept[cand[3]] = kept.get(cand[3], 0) + 1
            trials.append(cand)
    for c_r, c_t, moves, label in trials:
        state = model.save()
        _apply(model, moves, nx)
        involved = [x] + [p for _, src, dest in moves for p in (src, dest)]
        exact = float(state[1][x] * state[2][x] - model.loads[involved].max())
        model.restore(state)
        if exact > c_t and (best is None or exact > best[0]):
            best = (exact, c_t, moves, label)
    return best


def decide(snapshot: dict, *, trigger: float = 1.1, beta: float = 0.2, max_ops: int = 16,
           horizon: float = 0.0, measured: bool = False, corner: bool = True) -> Plan:
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
        counts = np.bincount(model.owner, minlength=model.num_partitions)
        exact = [counts[p] == _area(rects[p]) for p in range(model.num_partitions)]  # p is a rectangle
        Sx = S if exact[x] else prefix_grid(np.where(model.owner == x, model.subs, 0.0), nx, ny)
        cands: list[tuple[float, float, list, str]] = []  # (C_r, C_t, moves, label)

        def consider(c_r: float, c_t: float, moves: list, label: str) -> None:
            cands.append((c_r, c_t, moves, label))

        cut = best_cut(Sx, rects[x]) if _area(rects[x]) > 1 else None
        if cut is not None:
            x1, x2 = split_rect(rects[x], cut[0], cut[1])
            n1, n2 = rect_sum(Sx, x1), rect_sum(Sx, x2)
            free = [p for p in range(model.num_partitions) if _area(rects[p]) == 0]
            if free:
                f = free[0]
                consider(loads[x] - max(n1 * rate[x], n2 * rate[f]), beta * per_replica * n2,
                         [(x2, x, f)], f"split {x}->{f}")
            for y in range(model.num_partitions):
                for z in range(model.num_partitions):
                    if len({x, y, z}) < 3 or _area(rects[y]) == 0 or _area(rects[z]) == 0:
                        continue
                    if not (exact[y] and exact[z]):
                        continue
                    if _union(rects[y], rects[z]) is None:
                        continue
                    nz = rect_sum(S, rects[z])
                    merged = loads[y] + nz * rate[y]
                    c_r = loads[x] - max(n1 * rate[x], n2 * rate[z], merged)
                    consider(c_r, beta * per_replica * (n2 + nz), [(rects[z], z, y), (x2, x, z)],
                             f"split {x} merge {z}->{y}")
        if corner:  # shifts to every neighbour, whole side or not
            for b, bands in _bands(model.owner, nx, ny, x, rects[x]).items():
                whole = bool(exact[x] and exact[b]) and bool(_strips(rects[x], rects[b]))
                for cells in bands[:-1] if len(bands) > 1 else []:  # X keeps at least one layer
                    ns = float(model.subs[cells].sum())
                    c_r = loads[x] - max(loads[x] - ns * rate[x], loads[b] + ns * rate[b])
                    consider(c_r, beta * per_replica * ns, [(cells, x, b)], f"{'shift' if whole else 'corner shift'} {x}->{b}")
        else:
            for b in range(model.num_partitions):
                if b == x or _area(rects[b]) == 0:
                    continue
                for strip in _strips(rects[x], rects[b]):
                    ns = rect_sum(S, strip)
                    c_r = loads[x] - max(loads[x] - ns * rate[x], loads[b] + ns * rate[b])
                    consider(c_r, beta * per_replica * ns, [(strip, x, b)], f"shift {x}->{b}")
        best = _choose(model, cands, nx, x)
        if best is None:
            break
        c_r, c_t, moves, label = best
        _apply(model, moves, nx)
        model.operations.append(f"{label} (C_r {c_r:.3g} > C_t {c_t:.3g})")
        cost_total += c_t
    plan = model.plan("tornado", before, cost_total)
    return plan if plan.imbalance_after < before else empty_plan("tornado", before)
