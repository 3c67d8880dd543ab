"""Placement units on a fine grid: the shared machinery of the adaptive methods (agrid, kdt, qt, aqwa).

The four peer systems route *objects* to one partition by space and *queries* to every partition
their range overlaps.  A top-k subscription has no useful range: a message anywhere can enter its
top-k unless ``theta_s`` is close to 1 (the reach ``MaxDist * (1 - theta_s) / alpha_s`` is most of
the space on real workloads).  So here space places the *subscriptions*, and messages follow
Tornado's per-evaluator **keyword summaries**:

* The space is a fine grid of ``nx * ny`` cells.  Cells are grouped into **regions** (rectangles
  of cells, the leaves of a method's tree); a region may be split by text into ``g`` **groups**
  (consecutive term-id ranges).  A (region, group) is a **unit**, the smallest thing a
  rebalancing policy moves.  ``owner[unit]`` is its partition.
* A subscription goes to the units of its cell's region: one group per loose-prefix term
  (``replicate``: PS2Stream's text partitions), or only the group of its first loose-prefix term
  (``single``: SSTD's textual children).  It is placed in ``owner`` of those units.
* Each placement adds the subscription's loose-prefix terms that map to that unit (all of them in
  ``single`` mode) to the summary of the owning partition: ``holders[t, p]`` counts them.
* A message goes to every partition whose summary holds one of its terms.

**Meeting.**  If ``ST(s, m) >= theta_s``, m shares a loose-prefix term t with s (Lemma 7).  s is
placed in the unit u that t maps to (replicate) or in the one unit holding all of s's prefix
(single), and t is in the summary of ``owner[u]``; so m goes there.  Moving a unit moves its
subscriptions and their summary entries together, so meeting holds after every move.  A
subscription without terms is placed in group 0 of its region (it can match nothing).

**Pure routing.**  Cell, region, group and owner are table lookups on the record; only the
summaries depend on what is registered (as for ``prefix``).  Unseen term ids map to a group by
the same ranges and become live when a subscription holds them.

**Statistics (incremental).**  Per unit: the replicas placed and the bytes to move them (record,
terms and top-k state).  Per partition: the messages routed there.  Per grid cell: the messages
located there.  The load estimate of a unit is its share of its partition's measured load,
``|S_u| * |M_owner(u)|``, so a partition's unit costs sum to exactly its measured load
``|S_p| * |M_p|`` (:mod:`skype.partitioning.measure`).  The message counts have two layers, ``new``
(since the last fold) and ``old``; :meth:`fold_statistics` decays and folds them (AQWA's time
fading, §3.6; ``decay=0`` keeps only the last interval).  Each fold also records the **trend** of
every unit, its replicas now minus at the previous fold (arrivals less departures over the last
interval), which a policy may extrapolate one interval ahead, and keeps the term lists of the
messages of the last interval (``RECENT_SAMPLE`` of them, evenly spaced), from which a policy may
measure how many messages a partition's summary would meet after a move.  A batch known only by
its counts (the Spark partitions' reports, :mod:`skype.dskype.loadstats`) is added by
:meth:`UnitDistribution.observe_counts`, exactly as routing it would add it, except the messages
per partition, which the reports count their own way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from skype.errors import InputError
from skype.model import DEFAULT_BOUNDS, Bounds, MessageBatch, SubscriptionBatch
from skype.partitioning.base import Distribution, check_num_partitions, check_thresholds
from skype.partitioning.prefix import entry_rows, loose_prefix_lengths, prefix_mask
from skype.partitioning.registry import SubscriptionTable, check_unique_ids
from skype.partitioning.routing import Routing

DEFAULT_GRID = (256, 128)  # cells of 1.4 x 1.4 degrees on the whole globe
REPLICATE, SINGLE = 0, 1  # text modes of a region's groups
RECORD_BYTES = 48  # id, x, y, k, alpha, bookkeeping of a moved subscription
TERM_BYTES = 12  # term id + weight
RESULT_BYTES = 16  # one top-k entry (message id + score)
RECENT_SAMPLE = 1000  # messages of the last interval kept for the policies' rate estimates
_KEY = np.int64(1) << np.int64(32)  # region * _KEY + term: one sorted key space for all cuts


@dataclass(frozen=True)
class Grid:
    """``nx * ny`` equal cells over ``bounds``; cell id = ``iy * nx + ix``."""

    nx: int
    ny: int
    bounds: Bounds = DEFAULT_BOUNDS

    @property
    def num_cells(self) -> int:
        return self.nx * self.ny

    def cell_of(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        b = self.bounds
        ix = np.floor((np.asarray(x, np.float64) - b.minx) / (b.maxx - b.minx) * self.nx)
        iy = np.floor((np.asarray(y, np.float64) - b.miny) / (b.maxy - b.miny) * self.ny)
        ix = np.nan_to_num(ix, nan=0.0).clip(0, self.nx - 1).astype(np.int64)
        iy = np.nan_to_num(iy, nan=0.0).clip(0, self.ny - 1).astype(np.int64)
        return iy * self.nx + ix

    def rect_bounds(self, rect: tuple[int, int, int, int]) -> tuple[float, float, float, float]:
        """Coordinates of a cell rectangle ``(x0, y0, x1, y1)`` (half-open cell indices)."""
        b = self.bounds
        w, h = (b.maxx - b.minx) / self.nx, (b.maxy - b.miny) / self.ny
        x0, y0, x1, y1 = rect
        return (b.minx + x0 * w, b.miny + y0 * h, b.minx + x1 * w, b.miny + y1 * h)


def check_grid(grid: Any) -> tuple[int, int]:
    try:
        nx, ny = (int(v) for v in grid)
    except (TypeError, ValueError):
        raise InputError("E023", what="grid", expected="two integers (nx, ny) >= 1", value=grid) from None
    if nx < 1 or ny < 1 or nx * ny > 1 << 22:
        raise InputError("E023", what="grid", expected="two integers (nx, ny) >= 1, at most 4M cells", value=grid)
    return nx, ny


def subscription_bytes(lengths: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Bytes to move each subscription with its result state (record, terms, top-k entries)."""
    return RECORD_BYTES + TERM_BYTES * np.asarray(lengths, np.int64) + RESULT_BYTES * np.asarray(k, np.int64)


def candidate_costs(subs: SubscriptionBatch, sample: MessageBatch | None, lengths: np.ndarray,
                    vocab_size: int) -> np.ndarray:
    """Per subscription: sample messages sharing each placed prefix term, summed over its terms
    (its share of Eq. 1), plus 1 for holding it (the per-query cost)."""
    out = np.ones(len(subs), np.float64)
    if sample is None or len(sample) == 0 or len(subs.terms.ids) == 0:
        return out
    held = prefix_mask(subs.terms, lengths)
    rows, terms = entry_rows(subs.terms)[held], subs.terms.ids[held]
    freq = np.bincount(sample.terms.ids, minlength=max(vocab_size, int(terms.max(initial=0)) + 1))
    out += np.bincount(rows, weights=freq[terms].astype(np.float64), minlength=len(subs))
    return out


def recent_sample(batches: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``RECENT_SAMPLE`` evenly spaced messages of routed batches, as (lengths, term ids)."""
    lengths = np.concatenate([b[0] for b in batches])
    ids = np.concatenate([b[1] for b in batches])
    if len(lengths) <= RECENT_SAMPLE:
        return lengths.astype(np.int64), ids.astype(np.int64)
    pick = np.linspace(0, len(lengths) - 1, RECENT_SAMPLE).astype(np.int64)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    rows = np.repeat(np.arange(len(pick)), lengths[pick])
    offsets = np.arange(len(rows)) - np.repeat(np.cumsum(lengths[pick]) - lengths[pick], lengths[pick])
    return lengths[pick].astype(np.int64), ids[starts[pick][rows] + offsets].astype(np.int64)


class UnitDistribution(Distribution):
    """Subscriptions placed by units, messages routed by keyword summaries (module docstring).

    Subclasses build the regions, groups and owners; this class routes, keeps the summaries and
    the statistics, and applies moves.
    """

    broadcasts_messages = False

    def __init__(self, name: str, num_partitions: int, grid: Grid, cell_region: np.ndarray,
                 region_groups: np.ndarray, region_mode: np.ndarray, cut_keys: np.ndarray,
                 owner: np.ndarray, vocab_size: int) -> None:
        self.name = name
        self.num_partitions = check_num_partitions(num_partitions)
        self.grid = grid
        self.cell_region = np.asarray(cell_region, np.int64)  # region of each grid cell
        self.region_groups = np.asarray(region_groups, np.int64)  # text groups of each region (>= 1)
        self.region_mode = np.asarray(region_mode, np.int8)  # REPLICATE or SINGLE
        self.region_unit0 = np.r_[0, np.cumsum(self.region_groups)[:-1]].astype(np.int64)
        self.cut_keys = np.sort(np.asarray(cut_keys, np.int64))  # region * 2^32 + first term of group g >= 1
        regions = self.cut_keys // _KEY
        self.region_cut0 = np.searchsorted(regions, np.arange(len(self.region_groups)), side="left")
        self.owner = np.asarray(owner, np.int32).copy()  # partition of each unit
        self.unit_region = np.repeat(np.arange(len(self.region_groups)), self.region_groups)
        self.vocab_size = int(vocab_size)
        self.version = 0  # bumped by every move: the routing tables' version
        self.table = SubscriptionTable()
        # placements: one row per (subscription slot, unit, placed term); term -1 = termless
        self.pl_slot = np.zeros(0, np.int64)
        self.pl_unit = np.zeros(0, np.int64)
        self.pl_term = np.zeros(0, np.int64)
        self.holders = np.zeros((max(self.vocab_size, 1), self.num_partitions), np.int32)
        self._mask: np.ndarray | None = None
        self._new_live: list[np.ndarray] = []
        n_units = self.num_units
        self.unit_subs = np.zeros(n_units, np.int64)  # replicas placed in each unit
        self.unit_bytes = np.zeros(n_units, np.int64)  # bytes to move them
        self.part_msgs_new = np.zeros(self.num_partitions)  # messages routed to each partition
        self.part_msgs_old = np.zeros(self.num_partitions)
        self.term_msgs_new = np.zeros(len(self.holders))  # messages holding each term
        self.term_msgs_old = np.zeros(len(self.holders))
        self.msgs_new = 0.0  # messages routed (the same layers)
        self.msgs_old = 0.0
        self.cell_msgs_new = np.zeros(grid.num_cells)  # messages located in each cell
        self.cell_msgs_old = np.zeros(grid.num_cells)
        self.messages_seen = 0
        self.recent_new: list[tuple[np.ndarray, np.ndarray]] = []  # (lengths, term ids) of routed batches
        self.recent_old = (np.zeros(0, np.int64), np.zeros(0, np.int64))

    # ------------------------------------------------------------------ structure
    @property
    def num_units(self) -> int:
        return int(self.region_groups.sum())

    def units_of_entries(self, regions: np.ndarray, terms: np.ndarray) -> np.ndarray:
        """The unit of each (region, term): group = the term range of the region it falls in."""
        regions = np.asarray(regions, np.int64)
        if len(self.cut_keys) == 0:
            return self.region_unit0[regions]
        keys = regions * _KEY + np.asarray(terms, np.int64)
        group = np.searchsorted(self.cut_keys, keys, side="right") - self.region_cut0[regions]
        return self.region_unit0[regions] + group

    def _placements(self, batch: SubscriptionBatch, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, unit, term) of every placement of the batch (term -1 for a termless row)."""
        region = self.cell_region[self.grid.cell_of(batch.x, batch.y)]
        held = prefix_mask(batch.terms, lengths)
        rows, terms = entry_rows(batch.terms)[held], batch.terms.ids[held]
        first = np.full(len(batch), -1, np.int64)  # first placed term of each row
        if len(rows):
            starts = np.r_[True, rows[1:] != rows[:-1]]
            first[rows[starts]] = terms[starts]
        mode_single = self.region_mode[region[rows]] == SINGLE
        key_terms = np.where(mode_single, first[rows], terms)
        units = self.units_of_entries(region[rows], key_terms)
        termless = np.flatnonzero(first < 0)
        rows = np.r_[rows, termless]
        units = np.r_[units, self.region_unit0[region[termless]]]
        terms = np.r_[terms, np.full(len(termless), -1, np.int64)]
        return rows, units, terms

    # ------------------------------------------------------------------ summaries
    def _grow_vocab(self, top: int) -> None:
        if top > len(self.holders):
            extra = np.zeros((top - len(self.holders), self.num_partitions), np.int32)
            self.holders = np.concatenate([self.holders, extra])
            self._mask = None

    def _hold(self, terms: np.ndarray, parts: np.ndarray, delta: int) -> None:
        keep = terms >= 0
        terms, parts = terms[keep], parts[keep]
        if len(terms) == 0:
            return
        self._grow_vocab(int(terms.max()) + 1)
        width = self.num_partitions
        keys = terms * width + parts
        counts = np.bincount(keys - keys.min(), minlength=1)
        nz = np.flatnonzero(counts)
        flat = self.holders.reshape(-1)
        idx = nz + keys.min()
        if delta > 0:  # (term, partition) pairs going live: window copies to backfill
            newly = np.unique(terms[flat[keys] == 0])
            if len(newly):
                self._new_live.append(newly)
        flat[idx] += (delta * counts[nz]).astype(np.int32)
        self._mask = None

    def _live_mask(self) -> np.ndarray:
        """Packed bits (V, ceil(P/8)): partition p holds term t."""
        if self._mask is None:
            self._mask = np.packbits(self.holders > 0, axis=1, bitorder="little")
        return self._mask

    def pop_new_live_terms(self) -> np.ndarray:
        """Terms that became live in some partition's summary since the last call (sorted)."""
        if not self._new_live:
            return np.zeros(0, dtype=np.int64)
        out = np.unique(np.concatenate(self._new_live))
        self._new_live = []
        return out[(self.holders[out] > 0).any(axis=1)]

    def live_terms(self) -> np.ndarray:
        return np.flatnonzero((self.holders > 0).any(axis=1))

    # ------------------------------------------------------------------ registration
    def _register(self, batch: SubscriptionBatch, lengths: np.ndarray,
                  placements: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        rows, units, terms = placements
        if len(self.table.alive) and (~self.table.alive).sum() * 2 > len(self.table.alive):
            self._compact_placements()
        base = len(self.table.alive)
        self.table.add(batch, lengths)
        self.pl_slot = np.r_[self.pl_slot, base + rows]
        self.pl_unit = np.r_[self.pl_unit, units]
        self.pl_term = np.r_[self.pl_term, terms]
        self._hold(terms, self.owner[units], +1)
        self._count_units(rows, units, batch, +1)

    def _count_units(self, rows: np.ndarray, units: np.ndarray, batch: SubscriptionBatch, sign: int) -> None:
        key = np.unique(rows * np.int64(self.num_units) + units)
        r, u = np.divmod(key, self.num_units)
        size = subscription_bytes(batch.terms.lengths()[r], batch.k[r])
        self.unit_subs += sign * np.bincount(u, minlength=self.num_units)
        self.unit_bytes += sign * np.bincount(u, weights=size, minlength=self.num_units).astype(np.int64)

    def _compact_placements(self) -> None:
        alive = self.table.alive
        new_slot = np.cumsum(alive) - 1
        keep = alive[self.pl_slot]
        self.pl_slot = new_slot[self.pl_slot[keep]]
        self.pl_unit, self.pl_term = self.pl_unit[keep], self.pl_term[keep]
        self.table._compact()

    def _release(self, ids: np.ndarray, hold: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Unregister ids; returns the (terms, partitions) their placements held in the summaries,
        already released unless ``hold=False`` (the caller releases them after adding new ones,
        so that re-routing an id does not report its terms as newly live)."""
        slots = self.table.remove(ids)
        if len(slots) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        drop = np.isin(self.pl_slot, slots)
        units, terms = self.pl_unit[drop], self.pl_term[drop]
        parts = self.owner[units]
        if hold:
            self._hold(terms, parts, -1)
        rec = self.table.records.take(slots)
        pos = np.searchsorted(slots, self.pl_slot[drop])
        self._count_units(pos, units, rec, -1)
        keep = ~drop
        self.pl_slot, self.pl_unit, self.pl_term = self.pl_slot[keep], self.pl_unit[keep], self.pl_term[keep]
        return terms, parts

    # ------------------------------------------------------------------ routing
    def route_subscriptions(self, batch: SubscriptionBatch, thresholds: np.ndarray | None = None) -> Routing:
        thresholds = check_thresholds(thresholds, len(batch))
        check_unique_ids(batch.ids)
        lengths = loose_prefix_lengths(batch.terms, batch.alpha, thresholds)
        placements = self._placements(batch, lengths)
        old_terms, old_parts = self._release(batch.ids, hold=False)  # routing an id again replaces it
        self._register(batch, lengths, placements)
        self._hold(old_terms, old_parts, -1)
        rows, units, _ = placements
        return Routing.from_pairs(rows, self.owner[units], len(batch))

    def route_messages(self, batch: MessageBatch) -> Routing:
        n = len(batch)
        if n == 0:
            return Routing.empty(0)
        terms = batch.terms.ids
        self._grow_vocab(int(terms.max(initial=-1)) + 1)
        mask = self._live_mask()
        lens = batch.terms.lengths()
        words = np.zeros((n, mask.shape[1]), np.uint8)
        has = np.flatnonzero(lens > 0)
        if len(has):
            words[has] = np.bitwise_or.reduceat(mask[terms], batch.terms.indptr[has], axis=0)
        bits = np.unpackbits(words, axis=1, count=self.num_partitions, bitorder="little")
        rows, parts = np.nonzero(bits)
        self._observe(batch, parts)
        return Routing.from_sorted_pairs(rows.astype(np.int64), parts.astype(np.int32), n)

    def update_thresholds(self, sub_ids: np.ndarray, thresholds: np.ndarray) -> Routing:
        ids = np.asarray(sub_ids, dtype=np.int64).reshape(-1)
        theta = check_thresholds(thresholds, len(ids))
        if len(ids) == 0 or theta is None:
            return Routing.empty(len(ids))
        check_unique_ids(ids)
        slots = self.table.slots_of(ids)
        known = np.flatnonzero(slots >= 0)
        if len(known) == 0:
            return Routing.empty(len(ids))
        rec = self.table.records.take(slots[known])
        old_len = self.table.assigned[slots[known]]
        new_len = np.maximum(old_len, loose_prefix_lengths(rec.terms, rec.alpha, theta[known]))
        grew = np.flatnonzero(new_len > old_len)
        if len(grew) == 0:
            return Routing.empty(len(ids))
        before = self._partitions_of_slots(slots[known[grew]], len(grew))
        grown = rec.take(grew)
        old_terms, old_parts = self._release(grown.ids, hold=False)
        placements = self._placements(grown, new_len[grew])
        self._register(grown, new_len[grew], placements)
        self._hold(old_terms, old_parts, -1)
        rows, units, _ = placements
        after = Routing.from_pairs(rows, self.owner[units], len(grew))
        width = np.int64(self.num_partitions)
        b_rows, b_parts = before.pairs()
        a_rows, a_parts = after.pairs()
        new_keys = np.setdiff1d(a_rows * width + a_parts, b_rows * width + b_parts)
        return Routing.from_pairs(known[grew][new_keys // width], new_keys % width, len(ids))

    def _partitions_of_slots(self, slots: np.ndarray, num_rows: int) -> Routing:
        order = np.argsort(slots)
        ordered = slots[order]
        pos = np.searchsorted(ordered, self.pl_slot).clip(0, len(ordered) - 1)
        inside = ordered[pos] == self.pl_slot
        rows = order[pos[inside]]
        return Routing.from_pairs(rows, self.owner[self.pl_unit[inside]], num_rows)

    def remove_subscriptions(self, sub_ids: np.ndarray) -> None:
        self._release(np.asarray(sub_ids, dtype=np.int64).reshape(-1))

    # ------------------------------------------------------------------ statistics
    def _observe(self, batch: MessageBatch, partitions: np.ndarray) -> None:
        self.messages_seen += len(batch)
        if not hasattr(self, "recent_new"):  # a distribution pickled before the sample existed
            self.recent_new, self.recent_old = [], (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.recent_new.append((batch.terms.lengths(), batch.terms.ids.copy()))
        self.msgs_new += len(batch)
        self.cell_msgs_new += np.bincount(self.grid.cell_of(batch.x, batch.y), minlength=self.grid.num_cells)
        self.part_msgs_new += np.bincount(partitions, minlength=self.num_partitions)
        freq = np.bincount(batch.terms.ids, minlength=len(self.holders))
        if len(freq) > len(self.term_msgs_new):
            grow = len(freq) - len(self.term_msgs_new)
            self.term_msgs_new = np.r_[self.term_msgs_new, np.zeros(grow)]
            self.term_msgs_old = np.r_[self.term_msgs_old, np.zeros(grow)]
        self.term_msgs_new[:len(freq)] += freq

    def observe_counts(self, count: int, terms: np.ndarray, term_counts: np.ndarray, cells: np.ndarray,
                       cell_counts: np.ndarray, sample: tuple[np.ndarray, np.ndarray],
                       part_msgs: np.ndarray | None = None) -> None:
        """Add a batch of messages known by its counts (the partitions' reports,
        :mod:`skype.dskype.loadstats`) exactly as :meth:`route_messages` adds it: ``count``
        messages, sparse term and cell counts, the batch's recent sample ``(lengths, term ids)``
        and, when given, the messages per partition (the reports' count, not the summaries')."""
        if part_msgs is not None:
            self.part_msgs_new = self.part_msgs_new + np.asarray(part_msgs, np.float64)
        if count == 0:
            return  # route_messages observes nothing of an empty batch
        terms = np.asarray(terms, np.int64)
        top = int(terms.max(initial=-1)) + 1
        self._grow_vocab(top)
        self.messages_seen += int(count)
        self.recent_new.append((np.asarray(sample[0], np.int64), np.asarray(sample[1], np.int64)))
        self.msgs_new += int(count)
        np.add.at(self.cell_msgs_new, np.asarray(cells, np.int64), np.asarray(cell_counts, np.float64))
        width = max(len(self.holders), top)
        if width > len(self.term_msgs_new):
            grow = width - len(self.term_msgs_new)
            self.term_msgs_new = np.r_[self.term_msgs_new, np.zeros(grow)]
            self.term_msgs_old = np.r_[self.term_msgs_old, np.zeros(grow)]
        np.add.at(self.term_msgs_new, terms, np.asarray(term_counts, np.float64))

    def fold_statistics(self, decay: float) -> None:
        """``old <- old * decay + new; new <- 0`` (AQWA §3.6 with ``decay = 1/c``)."""
        self.part_msgs_old = self.part_msgs_old * decay + self.part_msgs_new
        self.part_msgs_new = np.zeros_like(self.part_msgs_new)
        self.cell_msgs_old = self.cell_msgs_old * decay + self.cell_msgs_new
        self.cell_msgs_new = np.zeros_like(self.cell_msgs_new)
        self.term_msgs_old = self.term_msgs_old * decay + self.term_msgs_new
        self.term_msgs_new = np.zeros_like(self.term_msgs_new)
        self.msgs_old, self.msgs_new = self.msgs_old * decay + self.msgs_new, 0.0
        base = getattr(self, "subs_at_fold", None)
        if base is not None and len(base) == len(self.unit_subs):
            self.unit_trend = self.unit_subs - base
        else:
            self.unit_trend = np.zeros_like(self.unit_subs)
        self.subs_at_fold = self.unit_subs.copy()
        if getattr(self, "recent_new", None):
            self.recent_old = recent_sample(self.recent_new)
            self.recent_new = []

    def reset_statistics(self) -> None:
        """Forget the message counts (the replica counts stay: they are the placement)."""
        for name in ("part_msgs_new", "part_msgs_old", "cell_msgs_new", "cell_msgs_old", "term_msgs_new",
                     "term_msgs_old"):
            setattr(self, name, np.zeros_like(getattr(self, name)))
        self.messages_seen = 0
        self.msgs_old = self.msgs_new = 0.0
        self.subs_at_fold = self.unit_subs.copy()
        self.unit_trend = np.zeros_like(self.unit_subs)
        self.recent_new, self.recent_old = [], (np.zeros(0, np.int64), np.zeros(0, np.int64))

    def partition_messages(self) -> np.ndarray:
        return self.part_msgs_old + self.part_msgs_new

    def unit_cost(self) -> np.ndarray:
        """Each unit's share of its partition's load, ``|S_u| * |M_owner|`` (both layers); the
        replica count alone before any message was routed."""
        msgs = self.partition_messages()
        if msgs.sum() == 0:
            return self.unit_subs.astype(np.float64)
        return self.unit_subs * msgs[self.owner]

    def unit_message_mass(self) -> np.ndarray:
        """Per unit, the messages holding each distinct term of its summary, summed over the
        terms: an upper bound on the messages that meet the unit (both layers)."""
        placed = self.pl_term >= 0
        key = np.unique(self.pl_unit[placed] * np.int64(len(self.holders)) + self.pl_term[placed])
        units, terms = np.divmod(key, np.int64(len(self.holders)))
        freq = self.term_msgs_old + self.term_msgs_new
        inside = terms < len(freq)
        mass = np.bincount(units[inside], weights=freq[terms[inside]], minlength=self.num_units)
        return np.minimum(mass, self.msgs_old + self.msgs_new)  # no more than the messages counted

    def partition_cost(self, unit_cost: np.ndarray | None = None) -> np.ndarray:
        cost = self.unit_cost() if unit_cost is None else unit_cost
        return np.bincount(self.owner, weights=cost, minlength=self.num_partitions)

    def statistics(self) -> dict:
        """The per-unit statistics a rebalancing policy reads (copies)."""
        return {"owner": self.owner.copy(), "unit_cost": self.unit_cost(), "unit_subs": self.unit_subs.copy(),
                "unit_bytes": self.unit_bytes.copy(), "unit_region": self.unit_region.copy(),
                "cell_region": self.cell_region.copy(), "cell_msgs": self.cell_msgs_old + self.cell_msgs_new,
                "partition_messages": self.partition_messages(), "unit_mass": self.unit_message_mass(),
                "unit_trend": getattr(self, "unit_trend", np.zeros_like(self.unit_subs)).copy(),
                "num_partitions": self.num_partitions, "grid": (self.grid.nx, self.grid.ny),
                "recent_messages": self.recent_messages(), "unit_terms": self.unit_terms(),
                "vocab_width": len(self.holders)}

    def recent_messages(self) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, term ids) of up to ``RECENT_SAMPLE`` messages of the last interval (or of the
        current one, before the first fold)."""
        recent = getattr(self, "recent_new", None)
        if recent:
            return recent_sample(recent)
        return getattr(self, "recent_old", (np.zeros(0, np.int64), np.zeros(0, np.int64)))

    def unit_terms(self) -> np.ndarray:
        """The distinct (unit, term) of the summaries' entries, as ``unit * V + term``."""
        placed = self.pl_term >= 0
        return np.unique(self.pl_unit[placed] * np.int64(len(self.holders)) + self.pl_term[placed])

    # ------------------------------------------------------------------ moves
    def move_units(self, units: np.ndarray, destinations: np.ndarray) -> tuple[int, int]:
        """Give each unit to its destination partition; returns (replicas moved, bytes moved).

        The unit's subscriptions and their summary entries move with it, so routing stays
        correct (module docstring); ``version`` is bumped."""
        units = np.asarray(units, np.int64)
        dest = np.asarray(destinations, np.int32)
        change = self.owner[units] != dest
        units, dest = units[change], dest[change]
        if len(units) == 0:
            return 0, 0
        if len(np.unique(units)) != len(units):
            raise InputError("E061", detail=f"a unit is moved twice in one step: {units.tolist()}")
        if dest.min() < 0 or dest.max() >= self.num_partitions:
            raise InputError("E061", detail=f"destination outside [0, {self.num_partitions})")
        sel = np.isin(self.pl_unit, units)
        terms, pl_units = self.pl_term[sel], self.pl_unit[sel]
        self._hold(terms, self.owner[pl_units], -1)
        self.owner[units] = dest
        self._hold(terms, self.owner[pl_units], +1)
        self.version += 1
        return int(self.unit_subs[units].sum()), int(self.unit_bytes[units].sum())

    def describe(self) -> dict:
        sizes = np.bincount(self.owner, minlength=self.num_partitions)
        return {**super().describe(), "grid": [self.grid.nx, self.grid.ny], "regions": len(self.region_groups),
                "units": self.num_units, "text_split_regions": int((self.region_groups > 1).sum()),
                "units_per_partition": sizes.tolist(), "version": self.version,
                "live_terms": int((self.holders > 0).any(axis=1).sum())}
