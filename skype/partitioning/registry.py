"""The subscriptions a distribution has routed: their records and the prefix length they were given.

Methods with thresholds (``prefix``, the hybrids) must remember each subscription's terms,
weights and alpha to recompute its loose prefix when only ``(id, new theta)`` arrives
(lazy reallocation), and how many leading terms it was already placed for.  Invariants:

* at most one *alive* slot per id; the owner removes an id before adding it again (routing
  an id again replaces it: unsubscribe + subscribe);
* ``assigned[slot]`` only grows while the slot lives: it is the longest loose prefix the
  subscription was ever placed for, so its replicas cover the union of all its prefixes;
* dead slots are dropped by compaction once they are half the table.

Lookup is a binary search over the sorted alive ids; adding a batch costs O(table) (arrays are
concatenated), so add subscriptions in batches.
"""

from __future__ import annotations

import numpy as np

from skype.errors import InputError
from skype.model import SubscriptionBatch, TermMatrix


def concat_subscriptions(parts: list[SubscriptionBatch]) -> SubscriptionBatch:
    return SubscriptionBatch(
        np.concatenate([p.ids for p in parts]), np.concatenate([p.x for p in parts]),
        np.concatenate([p.y for p in parts]), np.concatenate([p.k for p in parts]),
        np.concatenate([p.alpha for p in parts]), TermMatrix.concat([p.terms for p in parts]),
    )


def empty_subscriptions() -> SubscriptionBatch:
    z = np.zeros(0)
    return SubscriptionBatch(np.zeros(0, np.int64), z, z, np.zeros(0, np.int64), z,
                             TermMatrix(np.zeros(1, np.int64), np.zeros(0, np.int64), z))


def check_unique_ids(ids: np.ndarray) -> None:
    if len(ids) > 1:
        s = np.sort(ids)
        dup = np.flatnonzero(s[1:] == s[:-1])
        if len(dup):
            raise InputError("E007", id=int(s[dup[0]]), record_id=int(s[dup[0]]))


class SubscriptionTable:
    """Registered subscriptions (see module docstring)."""

    def __init__(self) -> None:
        self.records = empty_subscriptions()
        self.assigned = np.zeros(0, np.int64)
        self.alive = np.zeros(0, bool)
        self._sorted_ids = np.zeros(0, np.int64)
        self._sorted_slots = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self._sorted_ids)

    def slots_of(self, ids: np.ndarray) -> np.ndarray:
        """The alive slot of each id, -1 where the id is not registered."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(self._sorted_ids) == 0:
            return np.full(len(ids), -1, np.int64)
        pos = np.searchsorted(self._sorted_ids, ids).clip(0, len(self._sorted_ids) - 1)
        return np.where(self._sorted_ids[pos] == ids, self._sorted_slots[pos], -1)

    def add(self, batch: SubscriptionBatch, assigned: np.ndarray) -> None:
        """Register a batch of ids that are unique and not registered (``remove`` them first)."""
        if len(self.alive) and (~self.alive).sum() * 2 > len(self.alive):
            self._compact()
        self.records = concat_subscriptions([self.records, batch]) if len(self.alive) else batch
        self.assigned = np.concatenate([self.assigned, np.asarray(assigned, np.int64)])
        self.alive = np.concatenate([self.alive, np.ones(len(batch), bool)])
        self._reindex()

    def remove(self, ids: np.ndarray) -> np.ndarray:
        """Unregister ids (unknown ids are ignored); returns the slots removed.  Their records and
        ``assigned`` stay readable until the next ``add``."""
        slots = self.slots_of(ids)
        slots = np.unique(slots[slots >= 0])
        self.alive[slots] = False
        self._reindex()
        return slots

    def _compact(self) -> None:
        keep = np.flatnonzero(self.alive)
        self.records = self.records.take(keep)
        self.assigned = self.assigned[keep]
        self.alive = self.alive[keep]

    def _reindex(self) -> None:
        slots = np.flatnonzero(self.alive)
        order = np.argsort(self.records.ids[slots], kind="stable")
        self._sorted_slots = slots[order].astype(np.int64)
        self._sorted_ids = self.records.ids[self._sorted_slots]
