"""An independent oracle for top-k spatial-keyword pub/sub over a sliding window.

Independent by construction: this module imports numpy and the standard library only, never
``skype`` (not the core, not ``EngineBase``, not ``skype.reference``, not the validation).  It
takes term vectors as given (term ids and weights, as the engines receive them after
vectorisation) and keeps everything else itself:

* **Scores by another route.**  Subscriptions live in a dense matrix ``D`` (slot x term); a new
  message's text similarity to every subscription is one matrix-vector product
  ``D[:, terms] @ weights``, its distance to every subscription one ``np.hypot``, and
  ``ST = alpha * (1 - dist / MaxDist) + (1 - alpha) * cosine`` with MaxDist the diagonal of the
  bounds.  A subscription that shares no term with a message gets no score (-inf), whatever the
  weights.  The scores of the window live in a matrix ``SC`` (slot x window column).
* **Its own window bookkeeping.**  Count window of N: after an arrival the window holds the N
  newest messages.  Time window of T: after an arrival or ``advance(t)``, it holds exactly the
  messages with ``t - T < t_m <= t``, decided in exact rational arithmetic (``Fraction``), not
  by the float ``t_m <= t - T`` the engines write.
* **Its own ranking.**  Score descending, then the newer message (later arrival) first; a top-k
  is the ``min(k, matches)`` best.  Rows are ranked by a stable sort of the window's scores in
  newest-first column order, so equal floats fall to the newer message.

**Ties, and the margin argument.**  Both the oracle's and the engines' float scores are within a
few ulps (< 1e-14) of the exact value, so two scores more than ``DELTA = 1e-12`` apart are
ordered the same way by every correct engine, and the oracle decides them by its floats.  Two
scores of one subscription within ``DELTA`` are re-decided exactly (``Fraction``):

* an **exact tie**, when the two messages sit at the same exact distance from the subscription
  (the same exact squared distance, computed without rounding, or the same offsets
  ``{|dx|, |dy|}``) and carry identical weights on its terms (only the terms count at alpha = 0,
  only the offsets at alpha = 1): every engine computes the same float from the same operands,
  so the newer message must win, and the oracle ranks it first;
* otherwise a **near-tie**, which float rounding may decide either way (say, equal exact scores
  reached through different distances and cosines).  The oracle never guesses there: it
  records the subscription in ``ambiguous``; the differential driver then checks that
  subscription's top-k only up to near-ties (:func:`check_ranking`: every position holds a
  message of the same near-tie cluster, scores within ``DELTA``) and adopts the engine's choice
  (:meth:`Oracle.adopt`) before going on.  Everything else is compared exactly.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

DELTA = 1e-12
NEG = -np.inf


def _offset_key(sx: float, sy: float, mx: float, my: float):
    """The exact squared distance when every float route computes it without rounding (so equal
    keys give equal floats in any engine), else the exact offsets ``{|dx|, |dy|}``."""
    dx = abs(Fraction(mx) - Fraction(sx))
    dy = abs(Fraction(my) - Fraction(sy))
    q = dx * dx + dy * dy
    fdx, fdy = mx - sx, my - sy
    if Fraction(fdx) == dx or Fraction(fdx) == -dx:
        if (Fraction(fdy) == dy or Fraction(fdy) == -dy) and Fraction(fdx * fdx + fdy * fdy) == q \
                and Fraction(fdx * fdx) == dx * dx:
            return ("q", q)
    return ("offsets", tuple(sorted((dx, dy))))


class Oracle:
    """Brute-force top-k over a count (``window``) or time (``window_seconds``) window.

    Operations mirror the engines' but take term vectors as ``(term ids, weights)``:
    ``subscribe``, ``unsubscribe``, ``publish`` and ``advance`` return change rows
    ``(sub_id, msg_id, entered)`` sorted; ``topk``/``topn`` return ``[(msg_id, score)]``.
    """

    def __init__(self, *, bounds, window=None, window_seconds=None, num_terms=64, max_subs=64):
        assert (window is None) != (window_seconds is None)
        self.window, self.window_seconds = window, window_seconds
        minx, miny, maxx, maxy = bounds
        self.max_dist = float(np.hypot(maxx - minx, maxy - miny))
        self.T = None if window_seconds is None else Fraction(window_seconds)
        self.V = num_terms
        self.S = max_subs
        self.D = np.zeros((self.S, self.V))  # subscription slot x term: weight
        self.sx = np.zeros(self.S)
        self.sy = np.zeros(self.S)
        self.alpha = np.zeros(self.S)
        self.k = np.zeros(self.S, np.int64)
        self.live = np.zeros(self.S, bool)
        self.slot_of: dict[int, int] = {}
        self.sub_id = np.zeros(self.S, np.int64)
        self.reg = np.zeros(self.S, np.int64)  # registration number: keys the exact-tie cache
        self.registrations = 0
        self.free: list[int] = list(range(self.S))[::-1]
        self.C = 64  # window column capacity
        self.SC = np.full((self.S, self.C), NEG)
        self.top = np.zeros((self.S, self.C), bool)  # slot x column: in the slot's top-k
        self.head = self.tail = 0  # live columns head..tail-1, oldest first
        self.col_seq = np.zeros(self.C, np.int64)
        self.col_id = np.zeros(self.C, np.int64)
        self.col_x = np.zeros(self.C)
        self.col_y = np.zeros(self.C)
        self.col_t: list = [None] * self.C
        self.col_terms: list = [None] * self.C  # {term id: weight}
        self.seq = 0
        self.ambiguous: set[int] = set()  # subscriptions whose ranking met a near-tie
        self._exact: dict = {}

    # ------------------------------------------------------------------ storage
    def _grow_terms(self, top_id: int) -> None:
        if top_id < self.V:
            return
        v = max(top_id + 1, 2 * self.V)
        D = np.zeros((self.S, v))
        D[:, : self.V] = self.D
        self.D, self.V = D, v

    def _grow_subs(self) -> None:
        s = 2 * self.S
        def grow(a, fill=0):
            out = np.full((s,) + a.shape[1:], fill, dtype=a.dtype)
            out[: self.S] = a
            return out
        self.D, self.sx, self.sy, self.alpha = grow(self.D), grow(self.sx), grow(self.sy), grow(self.alpha)
        self.k, self.live, self.sub_id, self.reg = grow(self.k), grow(self.live), grow(self.sub_id), grow(self.reg)
        self.SC, self.top = grow(self.SC, NEG), grow(self.top)
        self.free = list(range(self.S, s))[::-1] + self.free
        self.S = s

    def _cols(self) -> np.ndarray:
        return np.arange(self.head, self.tail)

    def _append_column(self) -> int:
        if self.tail == self.C:
            n = self.tail - self.head
            if n * 2 > self.C:  # grow
                self.C *= 2
            cols = slice(self.head, self.tail)
            SC = np.full((self.S, self.C), NEG)
            SC[:, :n] = self.SC[:, cols]
            top = np.zeros((self.S, self.C), bool)
            top[:, :n] = self.top[:, cols]
            def move(a):
                out = np.zeros(self.C, a.dtype)
                out[:n] = a[cols]
                return out
            self.col_seq, self.col_id = move(self.col_seq), move(self.col_id)
            self.col_x, self.col_y = move(self.col_x), move(self.col_y)
            self.col_t = self.col_t[cols] + [None] * (self.C - n)
            self.col_terms = self.col_terms[cols] + [None] * (self.C - n)
            self.SC, self.top, self.head, self.tail = SC, top, 0, n
        c = self.tail
        self.tail += 1
        return c

    # ------------------------------------------------------------------ scoring
    def _score_column(self, mx, my, ids, w) -> np.ndarray:
        """Scores of one message against every subscription slot (-inf: no shared term)."""
        sub = self.D[:, ids]
        shared = (sub > 0).any(axis=1) & self.live
        cos = sub @ w
        ssim = 1.0 - np.hypot(self.sx - mx, self.sy - my) / self.max_dist
        st = self.alpha * ssim + (1.0 - self.alpha) * cos
        return np.where(shared, st, NEG)

    def _exact_key(self, slot: int, col: int):
        """({|dx|, |dy|} in Fraction, the message's weights on the subscription's terms)."""
        key = (int(self.reg[slot]), int(self.col_seq[col]))
        got = self._exact.get(key)
        if got is None:
            terms = self.col_terms[col]
            shared = tuple(sorted((t, terms[t]) for t in np.flatnonzero(self.D[slot]).tolist() if t in terms))
            offsets = _offset_key(float(self.sx[slot]), float(self.sy[slot]), float(self.col_x[col]),
                                  float(self.col_y[col]))
            got = self._exact[key] = (offsets, shared)
        return got

    def _exact_tie(self, slot: int, a: int, b: int) -> bool:
        (oa, ta), (ob, tb) = self._exact_key(slot, a), self._exact_key(slot, b)
        alpha = float(self.alpha[slot])
        return (alpha == 0.0 or oa == ob) and (alpha == 1.0 or ta == tb)

    def _cmp(self, slot: int, a: int, b: int) -> int:
        """-1 when column a ranks before column b for ``slot`` (near-ties: see module doc)."""
        sa, sb = self.SC[slot, a], self.SC[slot, b]
        if abs(sa - sb) > DELTA:
            return -1 if sa > sb else 1
        if not self._exact_tie(slot, a, b):
            self.ambiguous.add(int(self.sub_id[slot]))
            if sa != sb:
                return -1 if sa > sb else 1
        return -1 if self.col_seq[a] > self.col_seq[b] else 1

    def _float_ranked(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Matching window columns of ``slot`` by float score, equal floats newest first."""
        cols = self._cols()[::-1]  # newest first: the stable sort gives equal floats to the newer
        sc = self.SC[slot, cols]
        order = np.argsort(-sc, kind="stable")
        order = order[np.isfinite(sc[order])]
        return cols[order], sc[order]

    def _resolve(self, slot: int, ranked: np.ndarray, s: np.ndarray, lo: int) -> int:
        """Re-sort in place the run of scores chained within DELTA around position ``lo``;
        returns the end of the run."""
        while lo > 0 and s[lo - 1] - s[lo] <= DELTA:
            lo -= 1
        hi = lo
        while hi + 1 < len(s) and s[hi] - s[hi + 1] <= DELTA:
            hi += 1
        if hi > lo:
            run = list(ranked[lo : hi + 1])
            run.sort(key=functools.cmp_to_key(lambda a, b: self._cmp(slot, a, b)))
            ranked[lo : hi + 1] = run
        return hi + 1

    def _ranked_cols(self, slot: int, limit: int, resolve_all: bool = True) -> np.ndarray:
        """The first ``limit`` window columns of ``slot`` in ranking order; near-ties are
        re-decided exactly everywhere in them (``resolve_all``) or only across the cut."""
        ranked, s = self._float_ranked(slot)
        limit = min(limit, len(ranked))
        if limit == 0:
            return ranked[:0]
        if resolve_all:
            close = np.flatnonzero(s[:-1] - s[1:] <= DELTA)
            close = close[close < limit]
            i = 0
            while i < len(close):
                end = self._resolve(slot, ranked, s, int(close[i]))
                while i < len(close) and close[i] < end:
                    i += 1
        elif limit < len(ranked) and s[limit - 1] - s[limit] <= DELTA:
            self._resolve(slot, ranked, s, limit - 1)
        return ranked[:limit]

    # ------------------------------------------------------------------ top-k upkeep
    def _rerank(self, slots: np.ndarray) -> None:
        """Recompute the top-k membership of ``slots`` (vectorised, exact checks only at
        near-ties on the k-th place)."""
        if len(slots) == 0:
            return
        cols = self._cols()[::-1]
        W = len(cols)
        self.top[slots, :] = False
        if W == 0:
            return
        B = self.SC[np.ix_(slots, cols)]
        kk = np.minimum(self.k[slots], W)
        kmax = int(kk.max())
        order = np.argsort(-B, axis=1, kind="stable")[:, : min(kmax + 1, W)]
        SS = np.take_along_axis(B, order, axis=1)
        pos = np.arange(order.shape[1])
        member = (pos[None, :] < kk[:, None]) & np.isfinite(SS)
        r, p = np.nonzero(member)
        self.top[slots[r], cols[order[r, p]]] = True
        # the k-th place decided by a near-tie: redo exactly
        has_next = kk < W
        rows = np.flatnonzero(has_next)
        if len(rows):
            kth = SS[rows, kk[rows] - 1]
            nxt = SS[rows, kk[rows]]
            near = np.isfinite(kth) & np.isfinite(nxt)
            near[near] = kth[near] - nxt[near] <= DELTA
            for row in rows[near]:
                slot = int(slots[row])
                self.top[slot, :] = False
                self.top[slot, self._ranked_cols(slot, int(self.k[slot]), resolve_all=False)] = True

    def _kth(self, slots: np.ndarray) -> np.ndarray:
        """The current k-th score of each slot, -inf while fewer than k match."""
        cols = self._cols()
        out = np.full(len(slots), NEG)
        if len(cols) == 0:
            return out
        B = np.where(self.top[np.ix_(slots, cols)], self.SC[np.ix_(slots, cols)], np.inf)
        cnt = self.top[np.ix_(slots, cols)].sum(axis=1)
        full = cnt >= self.k[slots]
        out[full] = B[full].min(axis=1)
        return out

    def _changes(self, slots, before: np.ndarray, before_seq: np.ndarray, before_ids: np.ndarray):
        """(sub id, msg id, entered) rows: the top-k sets of ``slots`` before (``before``
        over columns of arrival numbers ``before_seq``) and now, compared by message id."""
        cols = self._cols()
        after = self.top[np.ix_(slots, cols)]
        seq = np.union1d(before_seq, self.col_seq[cols])
        ids = np.empty(len(seq), np.int64)
        ids[np.searchsorted(seq, before_seq)] = before_ids
        ids[np.searchsorted(seq, self.col_seq[cols])] = self.col_id[cols]
        old = np.zeros((len(slots), len(seq)), bool)
        new = np.zeros((len(slots), len(seq)), bool)
        old[:, np.searchsorted(seq, before_seq)] = before
        new[:, np.searchsorted(seq, self.col_seq[cols])] = after
        r_in, c_in = np.nonzero(new & ~old)
        r_out, c_out = np.nonzero(old & ~new)
        sid = self.sub_id[slots]
        rows = [(int(a), int(b), True) for a, b in zip(sid[r_in], ids[c_in])]
        rows += [(int(a), int(b), False) for a, b in zip(sid[r_out], ids[c_out])]
        if len({r[:2] for r in rows}) < len(rows):  # an id that left and came back in one step
            both = {r[:2] for r in rows if r[2]} & {r[:2] for r in rows if not r[2]}
            rows = [r for r in rows if r[:2] not in both]
        return rows

    def _expire_col(self) -> np.ndarray:
        """Drop the oldest column; returns the slots whose top-k held it."""
        c = self.head
        holders = np.flatnonzero(self.top[:, c])
        self.SC[:, c] = NEG
        self.top[:, c] = False
        self.col_terms[c] = None
        if len(self._exact) > 200_000:
            self._exact.clear()
        self.head += 1
        return holders

    def _expire(self, now) -> tuple[list[int], list]:
        holders: list = []
        if self.window is not None:
            while self.tail - self.head >= self.window:
                holders.append(self._expire_col())
        else:
            edge = Fraction(now) - self.T
            while self.head < self.tail and Fraction(self.col_t[self.head]) <= edge:
                holders.append(self._expire_col())
        return holders

    # ------------------------------------------------------------------ operations
    def subscribe(self, sid, x, y, k, alpha, ids, weights):
        assert sid not in self.slot_of, sid
        if not self.free:
            self._grow_subs()
        ids = np.asarray(ids, np.int64)
        self._grow_terms(int(ids.max()))
        slot = self.free.pop()
        self.slot_of[sid] = slot
        self.sub_id[slot], self.sx[slot], self.sy[slot] = sid, x, y
        self.k[slot], self.alpha[slot], self.live[slot] = k, alpha, True
        self.registrations += 1
        self.reg[slot] = self.registrations
        self.D[slot] = 0.0
        self.D[slot, ids] = weights
        cols = self._cols()
        for c in cols:
            t = np.fromiter(self.col_terms[c], np.int64)
            w = np.fromiter(self.col_terms[c].values(), float)
            shared = (self.D[slot, t] > 0).any()
            cos = self.D[slot, t] @ w
            ssim = 1.0 - np.hypot(x - self.col_x[c], y - self.col_y[c]) / self.max_dist
            self.SC[slot, c] = alpha * ssim + (1.0 - alpha) * cos if shared else NEG
        self._rerank(np.array([slot]))
        return self.topk(sid)

    def unsubscribe(self, sid):
        slot = self.slot_of.pop(sid)
        self.live[slot] = False
        self.D[slot] = 0.0
        self.SC[slot] = NEG
        self.top[slot] = False
        self.free.append(slot)

    def _step(self, now, message=None):
        cols0 = self._cols()
        before_ids = self.col_id[cols0].copy()
        before_seq = self.col_seq[cols0].copy()
        before_top = self.top[:, cols0].copy()
        touched = []
        holders = self._expire(now)
        if holders:
            h = np.unique(np.concatenate(holders))
            h = h[self.live[h]]
            cols = self._cols()
            # a holder with no match outside its top-k just loses the expired message
            more = np.isfinite(self.SC[np.ix_(h, cols)]).sum(axis=1) > self.top[np.ix_(h, cols)].sum(axis=1)
            self._rerank(h[more])
            touched.append(h)
        if message is not None:
            mid, x, y, t, ids, w = message
            ids = np.asarray(ids, np.int64)
            w = np.asarray(w, np.float64)
            self._grow_terms(int(ids.max()))
            col = self._append_column()
            self.col_seq[col], self.col_id[col] = self.seq, mid
            self.col_x[col], self.col_y[col], self.col_t[col] = x, y, t
            self.col_terms[col] = dict(zip(ids.tolist(), w.tolist()))
            self.seq += 1
            score = self._score_column(x, y, ids, w)
            cand = np.flatnonzero(np.isfinite(score))  # live slots sharing a term
            kth = self._kth(cand)  # before this arrival
            self.SC[:, col] = score
            room = kth == NEG  # fewer than k held: every match is in, and so is this one
            self.top[cand[room], col] = True
            full = cand[~room]
            self._rerank(full[score[full] >= kth[~room] - DELTA])
            touched.append(cand)
        if not touched:
            return []
        slots = np.unique(np.concatenate(touched))
        slots = slots[self.live[slots]]
        return sorted(self._changes(slots, before_top[slots], before_seq, before_ids))

    def publish(self, mid, x, y, t, ids, weights):
        """Slide over one message; ``t`` is its timestamp (count windows ignore it)."""
        return self._step(t, (int(mid), float(x), float(y), t, ids, weights))

    def advance(self, t):
        assert self.window_seconds is not None
        return self._step(t)

    # ------------------------------------------------------------------ reading
    def topn(self, sid, n):
        slot = self.slot_of[sid]
        cols = self._ranked_cols(slot, n)
        return [(int(self.col_id[c]), float(self.SC[slot, c])) for c in cols]

    def topk(self, sid):
        """The top-k as the oracle holds it (after :meth:`adopt`, the engine's near-tie choice)."""
        slot = self.slot_of[sid]
        cols = self._cols()
        held = cols[self.top[slot, cols]]
        ranked = self._ranked_cols(slot, len(cols))
        order = [c for c in ranked if self.top[slot, c]]
        assert len(order) == len(held)
        return [(int(self.col_id[c]), float(self.SC[slot, c])) for c in order]

    def ranking(self, sid):
        """Every matching window message of ``sid`` by float score (equal floats newest
        first), near-ties left as they fall: ``[(id, score)]``, for :func:`check_ranking`."""
        slot = self.slot_of[sid]
        cols, s = self._float_ranked(slot)
        return list(zip(self.col_id[cols].tolist(), s.tolist()))

    def adopt(self, sid, msg_ids) -> None:
        """Take the engine's top-k of ``sid`` (checked by :func:`check_ranking` first)."""
        slot = self.slot_of[sid]
        cols = self._cols()
        pos = {int(m): c for m, c in zip(self.col_id[cols], cols)}
        self.top[slot, :] = False
        self.top[slot, [pos[int(m)] for m in msg_ids]] = True

    def kth_score(self, sid) -> float:
        """The k-th best score, or 0.0 while fewer than k messages match."""
        top = self.topk(sid)
        return top[-1][1] if len(top) == self.k[self.slot_of[sid]] else 0.0

    def subscription_ids(self):
        return sorted(self.slot_of)

    def window_ids(self):
        return self.col_id[self._cols()].tolist()


def same_ranking(got, want, context="") -> None:
    """Engine top-k ``[(id, score)]`` equals the oracle's: ids in order, scores within DELTA."""
    gi, wi = [int(m) for m, _ in got], [m for m, _ in want]
    assert gi == wi, f"{context}: got ids {gi}, oracle {wi}"
    for (m, gs), (_, ws) in zip(got, want):
        assert abs(gs - ws) <= DELTA, f"{context}: message {m} scores {gs!r}, oracle {ws!r}"


def check_ranking(got, ranking, k, context="") -> None:
    """Engine top-k ``got`` against the oracle's full ``ranking``, up to near-ties: the right
    length, every message scored right (within DELTA), and position i holding a message of the
    same near-tie cluster (scores chained within DELTA) as the oracle's i-th."""
    assert len(got) == min(k, len(ranking)), f"{context}: {len(got)} entries, oracle {min(k, len(ranking))}"
    scores = np.array([s for _, s in ranking])
    cluster = np.concatenate([[0], np.cumsum(scores[:-1] - scores[1:] > DELTA)]) if len(ranking) else scores
    where = {m: i for i, (m, _) in enumerate(ranking)}
    assert len({int(m) for m, _ in got}) == len(got), f"{context}: duplicate ids {got}"
    for i, (m, s) in enumerate(got):
        j = where.get(int(m))
        assert j is not None, f"{context}: message {m} is not a match in the window"
        assert abs(s - ranking[j][1]) <= DELTA, f"{context}: message {m} scores {s!r}, oracle {ranking[j][1]!r}"
        assert cluster[j] == cluster[i], f"{context}: position {i} holds {m} ({s!r}), oracle {ranking[i]}"


def exact_score(alpha, sx, sy, s_terms, mx, my, m_terms, bounds) -> float:
    """One score by hand, as a check of the formula itself (cosine in Fraction)."""
    minx, miny, maxx, maxy = bounds
    cos = sum((Fraction(w) * Fraction(m_terms[t]) for t, w in s_terms.items() if t in m_terms), Fraction(0))
    dist = math.dist((sx, sy), (mx, my))
    return alpha * (1.0 - dist / math.dist((minx, miny), (maxx, maxy))) + (1.0 - alpha) * float(cos)


def replay_count_window(subs, msgs, window: int, bounds, chunk: int = 256):
    """The whole stream at once, for a fixed set of subscriptions on a count window: yields,
    per chunk of arrivals, ``(first, rows, ambiguous)`` where ``rows`` are the
    ``(arrival, sub id, msg id, entered)`` changes of those arrivals and ``ambiguous`` the
    ``(sub id, arrival)`` whose changes depend on a near-tie on the k-th place (module doc);
    ``rankings()``: after the chunk, ``{sub id: [(msg id, score)]}`` of every match, best
    first (equal floats newest first), for :func:`check_ranking`.

    ``subs`` = (ids, x, y, k, alpha, indptr, term ids, weights), ``msgs`` = (ids, x, y,
    indptr, term ids, weights), numpy arrays.  Vectorised: the score matrix of every
    subscription against every message is one dense product plus one ``np.hypot``; step j's
    window is the slice of columns ``j - N + 1 .. j`` (a ``sliding_window_view``); its top-k is
    what beats the k-th value (``np.partition``) plus, among scores equal to it, the newest.
    """
    sid, sx, sy, sk, sa, sptr, stid, sw = subs
    mid, mx, my, mptr, mtid, mw = msgs
    S, N, W = len(sid), len(mid), int(window)
    V = int(max(stid.max(), mtid.max())) + 1
    Ds = np.zeros((S, V))
    Ds[np.repeat(np.arange(S), np.diff(sptr)), stid] = sw
    Dm = np.zeros((V, N))
    Dm[mtid, np.repeat(np.arange(N), np.diff(mptr))] = mw
    max_dist = float(np.hypot(bounds[2] - bounds[0], bounds[3] - bounds[1]))
    shared = (Ds > 0).astype(np.float64) @ (Dm > 0).astype(np.float64) > 0
    score = sa[:, None] * (1.0 - np.hypot(sx[:, None] - mx[None, :], sy[:, None] - my[None, :]) / max_dist) \
        + (1.0 - sa[:, None]) * (Ds @ Dm)
    P = np.full((S, W + N), NEG)  # W padding columns: "no message yet"
    P[:, W:] = np.where(shared, score, NEG)
    col_id = np.concatenate([np.full(W, -1, np.int64), mid])
    views = np.lib.stride_tricks.sliding_window_view(P, W, axis=1)  # step j (0..N): columns j+1..j+W
    exact: dict = {}

    def exact_key(s, c):  # c: absolute column (>= W)
        key = (s, c)
        got = exact.get(key)
        if got is None:
            m = c - W
            mt = dict(zip(mtid[mptr[m]:mptr[m + 1]].tolist(), mw[mptr[m]:mptr[m + 1]].tolist()))
            st = stid[sptr[s]:sptr[s + 1]].tolist()
            got = exact[key] = (_offset_key(float(sx[s]), float(sy[s]), float(mx[m]), float(my[m])),
                                tuple((t, mt[t]) for t in st if t in mt))
        return got

    def members(lo, hi):
        """Membership (S, hi - lo, W) of steps lo..hi-1 (step j: after arrival j - 1; step 0 =
        empty window), and the subscriptions with a near-tie on the k-th place."""
        X = views[:, lo:hi, :]
        M = np.zeros(X.shape, bool)
        amb: set[tuple[int, int]] = set()
        for K in np.unique(sk):
            g = np.flatnonzero(sk == K)
            Xg = X[g]
            K = int(K)
            if K >= W:
                M[g] = np.isfinite(Xg)
                continue
            part = -np.partition(-Xg, [K - 1, K], axis=2)
            vk, vk1 = part[..., K - 1 : K], part[..., K : K + 1]
            greater = Xg > vk
            eq = (Xg == vk) & np.isfinite(Xg)
            need = K - greater.sum(axis=2, keepdims=True)
            newer_eq = np.cumsum(eq[..., ::-1], axis=2)[..., ::-1]  # equal ones at this place or newer
            M[g] = (greater & np.isfinite(Xg)) | (eq & (newer_eq <= need))
            near = np.isfinite(vk1[..., 0])
            near[near] = vk[..., 0][near] - vk1[..., 0][near] <= DELTA
            for r, j in zip(*np.nonzero(near)):
                s = int(g[r])
                if (int(sid[s]), lo + int(j)) in amb:
                    continue
                row = Xg[r, j]
                run = np.flatnonzero(np.abs(row - vk[r, j, 0]) <= DELTA)
                if (row[run] != row[run[0]]).any():  # different floats within DELTA: a near-tie
                    amb.add((int(sid[s]), lo + int(j)))
                    continue
                cols = run + lo + j
                first = exact_key(s, int(cols[0]))
                alpha = float(sa[s])
                for c in cols[1:]:
                    other = exact_key(s, int(c))
                    if not ((alpha == 0.0 or other[0] == first[0]) and (alpha == 1.0 or other[1] == first[1])):
                        amb.add((int(sid[s]), lo + int(j)))
                        break
        return M, amb

    for start in range(0, N, chunk):
        stop = min(N, start + chunk)
        M, near = members(start, stop + 1)  # steps start..stop: before arrival `start` .. after `stop - 1`
        # a near-tie on the k-th place at step j makes the changes of arrivals j - 1 and j moot
        amb = {(s, j - 1) for s, j in near} | near
        prev, cur = M[:, :-1, :], M[:, 1:, :]
        # align: column w of step j+1 is column w + 1 of step j
        entered = cur.copy()
        entered[:, :, :-1] &= ~prev[:, :, 1:]
        left = prev.copy()
        left[:, :, 1:] &= ~cur[:, :, :-1]
        rows = []
        for mask, flag, shift in ((entered, True, 2), (left, False, 1)):
            s, j, w = np.nonzero(mask)
            cols = start + j + w + shift - 1 + 0  # absolute column in P
            arrival = start + j
            rows.extend(zip(arrival.tolist(), sid[s].tolist(), col_id[cols].tolist(), [flag] * len(s)))
        def rankings(stop=stop):
            scores, ids = views[:, stop, ::-1], col_id[stop : stop + W][::-1]  # newest first
            order = np.argsort(-scores, axis=1, kind="stable")
            out = {}
            for i in range(S):
                o = order[i][np.isfinite(scores[i, order[i]])]
                out[int(sid[i])] = list(zip(ids[o].tolist(), scores[i, o].tolist()))
            return out

        yield start, rows, amb, rankings
