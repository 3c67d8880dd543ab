"""Measured message rates for the load model: how many messages a partition's summary meets after
a move, from a sample of the last interval's messages (``measured=True`` in the policies).

The plain load model (:class:`~skype.partitioning.rebalance.base.LoadModel`) takes a partition's
message rate ``M_q`` as fixed, raised at most to a moved unit's message mass: an upper bound that
ignores the overlap of summaries (a unit whose terms q already holds adds no message to q) and
never lowers the source's rate (a unit whose terms only it held takes those messages along).
Where terms are local (place names), both errors are large: a move can be planned as a gain and
measured as a loss.

Here, with the sample's messages ``m`` and the summaries' entries ``(unit, term)``:

* ``H[u, m] = 1`` iff message m holds a term of unit u's summary entries (``U @ T``, sparse);
* ``C[p, m]`` = the units of partition p that m meets; p's summary meets m iff ``C[p, m] > 0``;
* the rate of p is its measured rate scaled by the change of its covered sample messages,
  ``M_p * cover_p' / cover_p`` (the sample's own count, scaled to the interval, where p covered
  none before).

A move of units from s to q subtracts their rows from ``C[s]`` and adds them to ``C[q]``: exact
on the sample, for the destination (which gains only the messages it did not meet) and for the
source (which loses only the messages no other unit of it meets).  A cut piece gets its unit's
row (an upper bound of its own).  The sample is at most ``RECENT_SAMPLE`` messages, so the
estimate has a sampling error of a few percent.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse


class UnionRates:
    """Per-partition cover counts of the sample messages (module docstring)."""

    def __init__(self, snapshot: dict, owner: np.ndarray, measured: np.ndarray) -> None:
        lengths, ids = snapshot["recent_messages"]
        width = int(snapshot["vocab_width"])
        n_units, num_partitions = len(owner), len(measured)
        self.sample = len(lengths)
        rows = np.repeat(np.arange(self.sample), lengths)
        known = ids < width
        T = sparse.csr_matrix((np.ones(int(known.sum()), np.float32), (ids[known], rows[known])),
                              shape=(width, self.sample))
        units, terms = np.divmod(np.asarray(snapshot["unit_terms"], np.int64), np.int64(width))
        U = sparse.csr_matrix((np.ones(len(units), np.float32), (units, terms)), shape=(n_units, width))
        H = (U @ T).tocsr()
        H.data[:] = 1.0
        self.H = H
        owners = sparse.csr_matrix((np.ones(n_units, np.float32), (owner, np.arange(n_units))),
                                   shape=(num_partitions, n_units))
        self.C = np.asarray((owners @ H).todense(), np.int32)
        self.base = (self.C > 0).sum(axis=1).astype(np.float64)
        self.measured = np.asarray(measured, np.float64).copy()
        seen = self.base > 0
        # messages of the interval per covered sample message (for a partition that covered none)
        self.scale = float(np.median(self.measured[seen] / self.base[seen])) if seen.any() else 1.0

    def _rate(self, p: int, cover: float) -> float:
        if self.base[p] > 0:
            return float(self.measured[p] * cover / self.base[p])
        return float(cover * self.scale)

    def rate(self, p: int) -> float:
        return self._rate(p, float((self.C[p] > 0).sum()))

    def hits(self, units: np.ndarray) -> np.ndarray:
        return np.asarray(self.H[units].sum(axis=0)).ravel().astype(np.int32)

    def rate_with(self, p: int, units: np.ndarray) -> float:
        """p's rate if ``units`` joined it."""
        return self._rate(p, float(((self.C[p] > 0) | (self.hits(units) > 0)).sum()))

    def move(self, units: np.ndarray, sources: np.ndarray, dest: int) -> None:
        for s in np.unique(sources):
            self.C[s] -= self.hits(units[sources == s])
        self.C[dest] += self.hits(units)

    def add_piece(self, unit: int, partition: int) -> None:
        row = self.H[unit]
        self.H = sparse.vstack([self.H, row]).tocsr()
        self.C[partition] += np.asarray(row.todense()).ravel().astype(np.int32)
