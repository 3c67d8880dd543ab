"""Loose prefixes (spec §5.2, Eq. 18 and Def. 12): the terms a subscription must be reachable by.

For a subscription s with terms in the global order (ascending id) and unit weights
``w(s, 1..n)``, its suffix sums are ``wtsum(s, i) = sum_{j >= i} w(s, j)`` (Eq. 3).  Eq. 18 gives
the loose text threshold ``theta_T^lp = (theta_s - alpha_s) / (1 - alpha_s)``, and Def. 12 the loose
prefix ``{ s.psi[i] : wtsum(s, i) >= theta_T^lp }``.  Multiplying out (1 - alpha_s >= 0), term i
is kept iff

    reach(s, i) = alpha_s * 1 + (1 - alpha_s) * wtsum(s, i)  >=  theta_s - EPS.

That form is used here: it equals Def. 12 for alpha_s < 1 and needs no division, so alpha_s = 1
and theta_T^lp <= 0 are not special cases.

**Safety argument (Lemma 7).**  Let m be a message with ``ST(s, m) >= theta_s``.  m shares a term
with s (else it does not score at all); let i* be the position in s of the first shared term.
Every shared term sits at a position >= i*, and every weight of m is <= 1 (unit L2 vector,
non-negative weights), so ``TSim(s, m) <= sum_{j >= i*} w(s, j) = wtsum(s, i*)``.  With
``SSim <= 1`` this gives ``theta_s <= ST(s, m) <= reach(s, i*)``, so s.psi[i*] is kept: m shares a
loose-prefix term with s.  Because ``reach`` is non-increasing in i (weights > 0), the kept terms
form a prefix; its length is what this module computes.

* alpha_s = 1: ``reach = 1`` at every position, so every term is kept unless theta_s > 1 + EPS
  (then no message can qualify: SSim <= 1).  Keeping *every* term is required here, not just
  the first: a message sharing only the last term can still score SSim = 1.
* theta_T^lp <= 0 (theta_s <= alpha_s): ``reach >= alpha_s >= theta_s`` everywhere: all terms.
* theta_s = 0 (no pruning, or fewer than k results yet): all terms.
* No term reaches theta_s (theta_s above ``reach(s, 1)``): no message can qualify now, but the
  prefix still keeps **the first term**, so every subscription has at least one home replica to
  hold its state, and a later fall of theta_s only *adds* replicas (lazy reallocation).  Keeping
  more terms than needed is always safe (it only adds copies).
* Floating point: ``reach`` and the engine's scores are float64 sums of a few terms in [0, 1],
  so their rounding errors are ~1e-16; ``EPS = 1e-9`` keeps a term whenever it is within EPS
  of the threshold, on the safe side.  Suffix sums are summed per row from the last term
  backwards (exact per row, no global cumulative sum whose error grows with the batch).
"""

from __future__ import annotations

import numpy as np

from skype.model import TermMatrix

EPS = 1e-9


def entry_rows(terms: TermMatrix) -> np.ndarray:
    """The row of every entry of a CSR term matrix."""
    return np.repeat(np.arange(terms.rows, dtype=np.int64), terms.lengths())


def suffix_sums(terms: TermMatrix) -> np.ndarray:
    """``wtsum(s, i)`` for every entry (aligned with ``terms.ids``), summed from each row's end.

    >>> tm = TermMatrix([0, 3, 4], [1, 4, 9, 2], [0.5, 0.3, 0.2, 1.0])
    >>> suffix_sums(tm).round(12).tolist()
    [1.0, 0.5, 0.2, 1.0]
    """
    lens = terms.lengths()
    out = np.zeros(len(terms.ids), dtype=np.float64)
    if len(out) == 0:
        return out
    starts = terms.indptr[:-1]
    acc = np.zeros(terms.rows, dtype=np.float64)
    for pos in range(int(lens.max()) - 1, -1, -1):  # one vectorised step per position
        has = np.flatnonzero(lens > pos)
        idx = starts[has] + pos
        acc[has] += terms.weights[idx]
        out[idx] = acc[has]
    return out


def loose_prefix_lengths(terms: TermMatrix, alpha: np.ndarray, thresholds: np.ndarray | None) -> np.ndarray:
    """Number of leading terms of each row in its loose prefix (>= 1 for a non-empty row).

    ``thresholds=None`` means theta = 0 everywhere: every term.

    >>> tm = TermMatrix([0, 2, 4, 6], [0, 5, 0, 5, 0, 5], [0.8, 0.6] * 3)
    >>> loose_prefix_lengths(tm, np.array([0.0, 0.0, 1.0]), np.array([0.7, 0.5, 0.9])).tolist()
    [1, 2, 2]
    """
    lens = terms.lengths()
    if thresholds is None:
        return lens.astype(np.int64)
    rows = entry_rows(terms)
    a = np.asarray(alpha, dtype=np.float64)[rows]
    reach = a + (1.0 - a) * suffix_sums(terms)
    keep = reach >= np.asarray(thresholds, dtype=np.float64)[rows] - EPS
    kept = np.bincount(rows[keep], minlength=terms.rows).astype(np.int64)
    return np.where(lens > 0, np.maximum(kept, 1), 0)


def prefix_mask(terms: TermMatrix, lengths: np.ndarray) -> np.ndarray:
    """Boolean mask over the entries: True for the first ``lengths[row]`` entries of each row."""
    rows = entry_rows(terms)
    pos = np.arange(len(terms.ids), dtype=np.int64) - terms.indptr[rows]
    return pos < np.asarray(lengths, dtype=np.int64)[rows]
