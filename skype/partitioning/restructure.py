"""Runtime cuts of a hot unit for the tree methods (``kdt``, ``qt``): PS2Stream's Phase I text split
of a hot cell (Chen et al. §V-A) and SSTD's FG leaf split (Chen et al. 2020, §4).

A unit (a region's term-range group, see :mod:`skype.partitioning.units`) is cut in two pieces:

* **text cut** at term ``t``: the group's range ``[lo, hi)`` becomes ``[lo, t)`` and ``[t, hi)``;
  the new piece ``[t, hi)`` is unit ``u + 1`` (the units after ``u`` shift by one, so that a
  region's groups stay consecutive unit ids);
* **space cut** on ``(axis, line)`` of a region with one group: the cells of the region at or
  beyond the line form a new region, appended with one group (its unit is the last id).

**Invariants.**  Both pieces keep the owner of the unit cut, and a subscription's placed terms
keep their partition: in ``REPLICATE`` mode a placement goes to the group of its own term, in
``SINGLE`` mode all of a subscription's placements go to the group of its first placed term, and
both pieces sit in one partition.  So ``holders`` (the summaries), the routing of every message
and every subscription's partitions are the same before and after a cut; only the unit tables,
the placements of the touched subscriptions and the per-unit counts change.  A later
:meth:`~skype.partitioning.units.UnitDistribution.move_units` of a piece moves its subscriptions
with their summary entries, so meeting holds as after any move (tested against brute force).  In
``REPLICATE`` mode a subscription with terms on both sides of a text cut is placed in both
pieces (PS2Stream's replicated text partitions): moving one piece copies it.

A cut re-places the touched subscriptions with the distribution's own placement rule
(``_placements`` on their assigned loose prefixes), so the tables stay the single source of
truth, and ``version`` is bumped.  :func:`cut_options` evaluates the cuts of a unit on a policy's
snapshot (pure); :func:`cut_unit` carries one out.
"""

from __future__ import annotations

import numpy as np

from skype.errors import InputError
from skype.partitioning.capabilities import CAPABILITIES
from skype.partitioning.rects import Rect, best_cut, prefix_grid, split_rect
from skype.partitioning.units import _KEY, SINGLE, UnitDistribution, subscription_bytes

# methods whose units are tree leaves (agrid and aqwa keep cells whole)
CUTTABLE = tuple(m for m, c in CAPABILITIES.items() if c.cuttable)


def term_range(cut_keys: np.ndarray, region_cut0: np.ndarray, region_groups: np.ndarray, region: int,
               group: int) -> tuple[int, int]:
    """The term range ``[lo, hi)`` of a region's group (``hi`` = 2^32 - 1 for the last)."""
    first = int(region_cut0[region])
    lo = int(cut_keys[first + group - 1] - region * _KEY) if group > 0 else 0
    hi = int(cut_keys[first + group] - region * _KEY) if group + 1 < region_groups[region] else int(_KEY) - 1
    return lo, hi


def region_rect(cell_region: np.ndarray, region: int, nx: int) -> Rect:
    cells = np.flatnonzero(cell_region == region)
    ix, iy = cells % nx, cells // nx
    return int(ix.min()), int(iy.min()), int(ix.max()) + 1, int(iy.max()) + 1


def cut_snapshot(dist: UnitDistribution) -> dict:
    """What :func:`cut_options` reads, added to a policy's snapshot (copies)."""
    rec = dist.table.records
    lengths = rec.terms.lengths()
    first = np.where(lengths > 0, rec.terms.ids[np.minimum(rec.terms.indptr[:-1], max(len(rec.terms.ids) - 1, 0))]
                     if len(rec.terms.ids) else -1, -1)
    return {"pl_slot": dist.pl_slot.copy(), "pl_unit": dist.pl_unit.copy(), "pl_term": dist.pl_term.copy(),
            "slot_cell": dist.grid.cell_of(rec.x, rec.y), "slot_first": first.astype(np.int64),
            "slot_bytes": subscription_bytes(lengths, rec.k), "region_mode": dist.region_mode.copy(),
            "region_groups": dist.region_groups.copy(), "region_unit0": dist.region_unit0.copy(),
            "region_cut0": dist.region_cut0.copy(), "cut_keys": dist.cut_keys.copy()}


def cut_options(snap: dict, unit: int) -> list[tuple[str, object, float, float, float, float]]:
    """The best text cut and (for a one-group region) the best space cut of ``unit``:
    ``(kind, at, replicas of piece A, of piece B, bytes of A, of B)``, B being the new piece.
    Each cut minimises the larger piece's replicas."""
    sel = np.flatnonzero(snap["pl_unit"] == unit)
    if len(sel) == 0:
        return []
    slot, term = snap["pl_slot"][sel], snap["pl_term"][sel]
    region = int(snap["unit_region"][unit])
    group = unit - int(snap["region_unit0"][region])
    lo, hi = term_range(snap["cut_keys"], snap["region_cut0"], snap["region_groups"], region, group)
    slots, inv = np.unique(slot, return_inverse=True)
    nbytes = snap["slot_bytes"][slots].astype(np.float64)
    out: list[tuple[str, object, float, float, float, float]] = []
    if snap["region_mode"][region] == SINGLE:
        key_lo = key_hi = snap["slot_first"][slots]
    else:  # REPLICATE: a slot lands in A if it has a term < t, in B if it has one >= t
        key_lo = np.full(len(slots), np.iinfo(np.int64).max)
        key_hi = np.full(len(slots), -1, np.int64)
        np.minimum.at(key_lo, inv, term)
        np.maximum.at(key_hi, inv, term)
    cands = np.unique(term[(term > lo) & (term < hi)])
    if len(cands):
        a = np.searchsorted(np.sort(key_lo), cands, side="left")  # slots with a term < t
        b = len(slots) - np.searchsorted(np.sort(key_hi), cands, side="left")  # slots with a term >= t
        i = int(np.argmin(np.maximum(a, b)))
        if a[i] > 0 and b[i] > 0:
            in_a, in_b = key_lo < cands[i], key_hi >= cands[i]
            out.append(("text", int(cands[i]), float(a[i]), float(b[i]), float(nbytes[in_a].sum()),
                        float(nbytes[in_b].sum())))
    if snap["region_groups"][region] == 1:
        nx, ny = snap["grid"]
        cells = snap["slot_cell"][slots]
        rect = region_rect(snap["cell_region"], region, nx)
        S = prefix_grid(np.bincount(cells, minlength=nx * ny).astype(np.float64), nx, ny)
        cut = best_cut(S, rect)
        if cut is not None:
            _, far = split_rect(rect, cut[0], cut[1])
            cx, cy = cells % nx, cells // nx
            in_b = (cx >= far[0]) & (cx < far[2]) & (cy >= far[1]) & (cy < far[3])
            if 0 < in_b.sum() < len(slots):
                out.append(("space", (int(cut[0]), int(cut[1])), float((~in_b).sum()), float(in_b.sum()),
                            float(nbytes[~in_b].sum()), float(nbytes[in_b].sum())))
    return out


def cut_unit(dist: UnitDistribution, unit: int, kind: str, at) -> int:
    """Cut ``unit`` (module docstring); returns the new piece's unit id."""
    if not dist.capabilities.cuttable:
        raise InputError("E066", method=dist.name, detail=f"only {list(CUTTABLE)} cut units at runtime")
    unit = int(unit)
    if not 0 <= unit < dist.num_units:
        raise InputError("E066", method=dist.name, detail=f"no unit {unit}")
    region = int(dist.unit_region[unit])
    groups = dist.region_groups.copy()
    cell_region, cut_keys, mode = dist.cell_region.copy(), dist.cut_keys, dist.region_mode.copy()
    old_n = dist.num_units
    if kind == "text":
        lo, hi = term_range(dist.cut_keys, dist.region_cut0, dist.region_groups, region,
                            unit - int(dist.region_unit0[region]))
        if not lo < int(at) < hi:
            raise InputError("E066", method=dist.name, detail=f"term {at} is not inside the range [{lo}, {hi})")
        new = unit + 1
        unit_map = np.arange(old_n) + (np.arange(old_n) > unit)
        groups[region] += 1
        cut_keys = np.sort(np.r_[cut_keys, region * _KEY + int(at)])
        owner = np.insert(dist.owner, new, dist.owner[unit])
    elif kind == "space":
        if groups[region] != 1:
            raise InputError("E066", method=dist.name, detail=f"region {region} is split by text; cut it by text")
        axis, line = (int(v) for v in at)
        rect = region_rect(dist.cell_region, region, dist.grid.nx)
        lo_line, hi_line = (rect[0], rect[2]) if axis == 0 else (rect[1], rect[3])
        if not lo_line < line < hi_line:
            raise InputError("E066", method=dist.name, detail=f"line {line} does not cut region {region}")
        cells = np.flatnonzero(dist.cell_region == region)
        coord = cells % dist.grid.nx if axis == 0 else cells // dist.grid.nx
        cell_region[cells[coord >= line]] = len(groups)
        groups = np.r_[groups, 1]
        mode = np.r_[mode, mode[region]]
        new = old_n
        unit_map = np.arange(old_n)
        owner = np.r_[dist.owner, dist.owner[unit]]
    else:
        raise InputError("E066", method=dist.name, detail=f"unknown cut kind {kind!r}")
    _retable(dist, cell_region, groups, mode, cut_keys, owner, unit_map, unit, new)
    return new


def _retable(dist: UnitDistribution, cell_region: np.ndarray, groups: np.ndarray, mode: np.ndarray,
             cut_keys: np.ndarray, owner: np.ndarray, unit_map: np.ndarray, unit: int, new: int) -> None:
    """Install the new tables and re-place the subscriptions placed in ``unit``."""
    touched = np.isin(dist.pl_slot, np.unique(dist.pl_slot[dist.pl_unit == unit]))
    slots = np.unique(dist.pl_slot[touched])
    old_terms, old_parts = dist.pl_term[touched], dist.owner[dist.pl_unit[touched]]
    keep = ~touched
    kept = (dist.pl_slot[keep], unit_map[dist.pl_unit[keep]], dist.pl_term[keep])
    old_subs, old_bytes = dist.unit_subs, dist.unit_bytes
    base = getattr(dist, "subs_at_fold", None)
    trend_base = base is not None and len(base) == len(old_subs)
    dist.cell_region = np.asarray(cell_region, np.int64)
    dist.region_groups = np.asarray(groups, np.int64)
    dist.region_mode = np.asarray(mode, np.int8)
    dist.region_unit0 = np.r_[0, np.cumsum(dist.region_groups)[:-1]].astype(np.int64)
    dist.cut_keys = np.sort(np.asarray(cut_keys, np.int64))
    dist.region_cut0 = np.searchsorted(dist.cut_keys // _KEY, np.arange(len(dist.region_groups)), side="left")
    dist.owner = np.asarray(owner, np.int32)
    dist.unit_region = np.repeat(np.arange(len(dist.region_groups)), dist.region_groups)
    n = dist.num_units
    others = np.flatnonzero(np.arange(len(old_subs)) != unit)
    dist.unit_subs = np.zeros(n, np.int64)
    dist.unit_bytes = np.zeros(n, np.int64)
    dist.unit_subs[unit_map[others]] = old_subs[others]
    dist.unit_bytes[unit_map[others]] = old_bytes[others]
    rec = dist.table.records.take(slots)
    rows, units, terms = dist._placements(rec, dist.table.assigned[slots])
    dist.pl_slot = np.r_[kept[0], slots[rows]]
    dist.pl_unit = np.r_[kept[1], units]
    dist.pl_term = np.r_[kept[2], terms]
    dist._count_units(rows, units, rec, +1)
    dist._hold(terms, dist.owner[units], +1)
    dist._hold(old_terms, old_parts, -1)
    if trend_base:  # the pieces share the unit's trend in proportion to their replicas
        assert base is not None
        new_base = np.zeros(n, np.int64)
        new_base[unit_map[others]] = base[others]
        pieces = [unit_map[unit], new]
        total = max(int(dist.unit_subs[pieces].sum()), 1)
        for p in pieces:
            new_base[p] = int(round(base[unit] * dist.unit_subs[p] / total))
        dist.subs_at_fold = new_base
        dist.unit_trend = dist.unit_subs - new_base
    dist.version += 1
