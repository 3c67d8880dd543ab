"""Keyword and prefix distributions (spec §5.2, Eqs. 16-18, Algorithm 4, Lemma 7).

**Ranges.**  Term ids are the global order (df ascending, id 0 = rarest).  The vocabulary of the
build, ids ``[0, V0)``, is cut into P consecutive, disjoint, covering ranges ``K_0 .. K_{P-1}``
(some may be empty when P exceeds the vocabulary).  Algorithm 4, ``KP(V[lo..hi), P)``: with
``P_L = floor(P/2)`` and ``P_R = P - P_L``, the cut x minimises

    | Cost(V[lo..x)) / P_L - Cost(V[x..hi)) / P_R |,   Cost(K) = |S_K| * P(K)     (Eq. 16)

by a linear scan, then both sides recurse: recursive bisection with depth log P, O(|V| log P)
in total.  ``|S_K|`` counts subscriptions having a (loose-prefix, for ``prefix``) term in K,
``P(K)`` the fraction of sample messages having a (live, with summaries) term in K; both counts
are scanned incrementally (a row enters the left side once x passes its smallest term of the
range, and leaves the right side once x passes its largest).  Ties (every cost 0, e.g. no
sample) go to the cut balancing subscription counts, then to the proportional position.  This
bisection is the paper's heuristic for the variance objective (Eq. 17), not its optimum;
``describe()`` reports the variance reached.  That is ``cut="bisection"``.

**Balanced cut** (``cut="balanced"``, the default).  A partition's engine does not do
``|S_K| * P(K)`` work: for each message that reaches it, it scans the postings of *every* term of
the message among the subscriptions placed there, not only of the terms in its range, and pays a
fixed cost per message besides.  ``P(K)`` also saturates near 1 on any range of frequent terms.
The balanced cut weighs a range by that work on the sample (:class:`RangePostings`) and cuts the
consecutive ranges whose largest weight is the least possible (:func:`balanced_ranges`, exact for
a weight that grows with the range).  The measured effect on Spark is on the results page
(``docs/results-spark.md``, "prefix at P = 8").  A range that is one term can still weigh more
than 1/P.

**Work cut** (``cut="work"``).  The balanced cut's min-max with weights fitted on per-partition
engines in one process (``bench/partition_work.py``): ``WORK_MESSAGE_WEIGHT`` per message reaching
the range and ``WORK_HOLDING_WEIGHT`` per subscription placed there and sample message (the
upkeep of a held subscription in every batch).  Every cut gives consecutive ranges, so
everything below holds for each.

**Unseen terms.**  A term id ``t >= V0`` (first seen after the build) belongs to partition
``(t - V0) mod P``: a fixed rule, so late terms spread round-robin and route deterministically.

**keyword** (Eq. 16): a subscription goes to every partition whose range meets its terms, a
message likewise.  Replication <= min(|s.psi|, P), communication <= min(|m.psi|, P).  Meeting:
a message scoring at all shares a term t with s; both go to t's partition.

**prefix** (Eq. 18, Def. 12, Lemma 7): a subscription goes only to the partitions of its loose
prefix (see :mod:`skype.partitioning.prefix` for the formula and its safety argument), and the ranges are
cut with ``|S_K|`` over loose prefixes.  **Keyword summaries** (Tornado's per-evaluator
summaries): a message goes to the partition of its term t only if t is *live*, i.e. held in the
assigned loose prefix of some registered subscription (``holders[t] > 0``).  Meeting: if
``ST(s, m) >= theta_s`` then m shares a loose-prefix term t of s (Lemma 7); s was placed in t's
partition and t is live, so m goes there too.  Unseen terms follow the same rule.

**Lazy reallocation.**  Each registered subscription remembers ``assigned``, the longest loose
prefix it was placed for.  ``update_thresholds`` recomputes the prefix; if it grew, the terms
between the old and the new length become held (summary grows) and the partitions they add,
minus those already held, are returned.  A shrinking prefix changes nothing.
"""

from __future__ import annotations

from typing import Callable, Self

import numpy as np

from skype.partitioning.base import Distribution, check_num_partitions, check_thresholds
from skype.partitioning.hashing import hash_partition
from skype.partitioning.prefix import entry_rows, loose_prefix_lengths, prefix_mask
from skype.partitioning.registry import SubscriptionTable, check_unique_ids
from skype.partitioning.routing import Routing
from skype.errors import invalid_choice
from skype.model import MessageBatch, SubscriptionBatch, TermMatrix
from skype.text import Vocabulary

CUTS = ("balanced", "bisection", "work")  # how the vocabulary is cut into ranges (module docstring)
MESSAGE_WEIGHT = 250  # what a message reaching a partition costs its engine besides postings (RangePostings)
# the "work" cut's weights, in postings: fitted on per-partition engines (bench/partition_work.py)
WORK_MESSAGE_WEIGHT = 75  # a message reaching the partition
WORK_HOLDING_WEIGHT = 0.0056  # a subscription placed there, per sample message (its upkeep per batch)
MODEL_SUBSCRIPTIONS = 50_000  # the balanced cut weighs ranges with at most this many subscriptions (evenly spaced)
CUT_TOLERANCE = 0.002  # the balanced cut's largest range is within this fraction of the least possible


def _row_extremes(rows: np.ndarray, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest term of each row present (entries sorted by row, then term)."""
    if len(rows) == 0:
        return terms[:0], terms[:0]
    first = np.r_[True, rows[1:] != rows[:-1]]
    last = np.r_[rows[1:] != rows[:-1], True]
    return terms[first], terms[last]


def keyword_ranges(num_terms: int, num_partitions: int, sub_rows: np.ndarray, sub_terms: np.ndarray,
                   msg_rows: np.ndarray, msg_terms: np.ndarray) -> np.ndarray:
    """Algorithm 4: ``starts`` (int64, P + 1) with partition i = term ids ``[starts[i], starts[i+1])``.

    Entries are (row, term) occurrences sorted by row then term, terms in ``[0, num_terms)``.

    >>> # 6 terms, one subscription each; one message per term, but ten messages hold term 5
    >>> msg_terms = np.array([0, 1, 2, 3, 4] + [5] * 10)
    >>> keyword_ranges(6, 2, np.arange(6), np.arange(6), np.arange(15), msg_terms).tolist()
    [0, 4, 6]
    """
    starts = np.zeros(num_partitions + 1, dtype=np.int64)
    starts[num_partitions] = num_terms

    def kp(lo: int, hi: int, first: int, parts: int, s_rows, s_terms, m_rows, m_terms) -> None:
        starts[first] = lo
        if parts == 1:  # line 1
            return
        p_left = parts // 2  # line 2
        p_right = parts - p_left
        n = hi - lo
        if n <= 1:
            x = hi  # one term or none: it stays left, the right partitions are empty
        else:  # line 3: left = [lo, x), right = [x, hi) for x in lo+1 .. hi-1
            s_min, s_max = _row_extremes(s_rows, s_terms)
            m_min, m_max = _row_extremes(m_rows, m_terms)
            subs_l = np.cumsum(np.bincount(s_min - lo, minlength=n))[:-1].astype(np.float64)
            subs_r = len(s_max) - np.cumsum(np.bincount(s_max - lo, minlength=n))[:-1].astype(np.float64)
            msgs_l = np.cumsum(np.bincount(m_min - lo, minlength=n))[:-1].astype(np.float64)
            msgs_r = len(m_max) - np.cumsum(np.bincount(m_max - lo, minlength=n))[:-1].astype(np.float64)
            objective = np.abs(subs_l * msgs_l / p_left - subs_r * msgs_r / p_right)
            sub_balance = np.abs(subs_l / p_left - subs_r / p_right)
            position = np.abs(np.arange(1, n) / n - p_left / parts)
            x = lo + 1 + int(np.lexsort((position, sub_balance, objective))[0])
        s_left, m_left = s_terms < x, m_terms < x
        kp(lo, x, first, p_left, s_rows[s_left], s_terms[s_left], m_rows[m_left], m_terms[m_left])  # line 4
        kp(x, hi, first + p_left, p_right, s_rows[~s_left], s_terms[~s_left], m_rows[~m_left], m_terms[~m_left])

    kp(0, num_terms, 0, num_partitions, sub_rows, sub_terms, msg_rows, msg_terms)
    return starts


class RangePostings:
    """The work of a partition holding the term range ``[a, b)``, on a message sample: the load
    model of the balanced cut (module docstring), in postings.

    A subscription is *placed* on the range when one of its held terms (its loose prefix for
    ``prefix``, every term for ``keyword``) lies in it; a message *reaches* the range when one of
    its routed terms does: a *live* term, held by some subscription, for ``prefix`` (its keyword
    summaries; on Spark the runtime keeps them itself, :mod:`skype.dskype.summaries`) and for
    ``keyword`` with summaries, else every term.  The engine of the range scans, for each message
    that reaches it, the postings of *every* term of the message among the placed subscriptions,
    and pays a cost per message besides (the window's upkeep, and the admissions of its replicas'
    local lists, which the postings do not count), and, with ``holding_weight``, a cost per placed
    subscription and sample message:

        W([a, b)) = sum over reaching m of (message_weight + scale * sum over t in m of |placed holding t|)
                    + holding_weight * scale * |placed| * |sample|

    ``message_weight`` is that cost in postings: ``MESSAGE_WEIGHT`` was fitted on the partitions'
    counters and engine CPU seconds of a ``prefix`` run on Spark (``docs/results-spark.md``,
    "prefix at P = 8").  ``scale`` makes up for subscriptions left out of the model (every
    ``scale``-th is in it).  W only grows when the range does; one call is a pass over the
    sample's and the model subscriptions' entries.

    >>> subs = TermMatrix([0, 2, 3], [0, 2, 2], [0.6, 0.8, 1.0])      # {0, 2} and {2}
    >>> msgs = TermMatrix([0, 1, 3, 4], [2, 0, 2, 1], [1.0, 0.6, 0.8, 1.0])
    >>> w = RangePostings(3, entry_rows(subs), subs.ids, subs, msgs, None, message_weight=0)
    >>> w(0, 1), w(2, 3), w(0, 3)  # range {0}: one sub, one message with 2 terms: 1 + 1
    (2, 5, 5)
    >>> RangePostings(3, entry_rows(subs), subs.ids, subs, msgs, None, message_weight=10)(0, 1)
    12
    >>> RangePostings(3, entry_rows(subs), subs.ids, subs, msgs, None, message_weight=10, scale=3)(0, 1)
    16
    >>> # and one placed subscription for each of the 3 sample messages: 2 + 3
    >>> RangePostings(3, entry_rows(subs), subs.ids, subs, msgs, None, message_weight=0, holding_weight=1.0)(0, 1)
    5
    """

    def __init__(self, num_terms: int, held_rows: np.ndarray, held_terms: np.ndarray, subs: TermMatrix,
                 msgs: TermMatrix, live: np.ndarray | None, *, message_weight: int = MESSAGE_WEIGHT,
                 holding_weight: float = 0.0, scale: int = 1) -> None:
        self.num_terms = num_terms
        self.message_weight, self.scale = int(message_weight), int(scale)
        self.holding_weight = float(holding_weight)
        self.num_subs = subs.rows
        self.held_rows, self.held_terms = held_rows, held_terms
        self.sub_rows, self.sub_terms = entry_rows(subs), subs.ids
        self.num_msgs = msgs.rows
        msg_rows = entry_rows(msgs)
        self.msg_rows, self.msg_terms = msg_rows, msgs.ids
        keep = np.ones(len(msgs.ids), bool) if live is None else live[msgs.ids]
        self.route_rows, self.route_terms = msg_rows[keep], msgs.ids[keep]

    def __call__(self, a: int, b: int) -> int:
        inside = (self.held_terms >= a) & (self.held_terms < b)
        placed = np.zeros(self.num_subs, bool)
        placed[self.held_rows[inside]] = True
        holders = np.bincount(self.sub_terms[placed[self.sub_rows]], minlength=self.num_terms)
        reach = np.zeros(self.num_msgs, bool)
        reach[self.route_rows[(self.route_terms >= a) & (self.route_terms < b)]] = True
        postings = int(holders[self.msg_terms[reach[self.msg_rows]]].sum())
        holding = int(self.holding_weight * self.scale * int(placed.sum()) * self.num_msgs)
        return self.scale * postings + self.message_weight * int(reach.sum()) + holding


def balanced_ranges(cost: Callable[[int, int], int], num_terms: int, num_partitions: int, *,
                    tolerance: float = 0.0) -> np.ndarray:
    """``starts`` (int64, P + 1) of the consecutive ranges whose largest cost is the least possible,
    for a ``cost(a, b)`` of the range ``[a, b)`` that never falls when the range grows (the linear
    partition problem in min-max form).

    The least feasible cap C is found by bisection over the integers.  A cap is feasible iff the
    greedy cut from the right (each range reaches as far left as its cost stays <= C) needs at most
    P ranges; for a cost monotone under inclusion the greedy cut is optimal for its cap (any
    feasible cut's i-th range from the right starts no further left).  A check is P binary
    searches, each over ``log V`` calls of ``cost``.  The spare room of the optimum lands on the
    leftmost ranges (the rarest terms).  With ``tolerance`` > 0 the bisection stops once the cap is
    known within that fraction: the largest range then costs at most ``1 + tolerance`` times the
    least possible, for far fewer checks.

    >>> costs = np.array([1, 1, 1, 1, 4, 4])
    >>> summed = lambda a, b: int(costs[a:b].sum())
    >>> balanced_ranges(summed, 6, 3).tolist()
    [0, 4, 5, 6]
    >>> balanced_ranges(lambda a, b: 0, 3, 2).tolist()  # nothing to balance: one range holds all
    [0, 0, 3]
    """

    def cut_from_right(cap: int) -> np.ndarray | None:
        ends = [num_terms]
        for _ in range(num_partitions):
            end = ends[-1]
            if end == 0:
                break
            lo, hi = 0, end  # the smallest start with cost(start, end) <= cap
            while lo < hi:
                mid = (lo + hi) // 2
                if cost(mid, end) <= cap:
                    hi = mid
                else:
                    lo = mid + 1
            if lo == end:
                return None  # the term before ``end`` alone costs more than the cap
            ends.append(lo)
        if ends[-1] > 0:
            return None
        starts = np.zeros(num_partitions + 1, np.int64)
        starts[num_partitions] = num_terms
        inner = ends[::-1][1:-1]  # the cut points, ascending, at most P - 1 of them
        starts[num_partitions - len(inner):num_partitions] = inner
        return starts

    lo, hi = 0, cost(0, num_terms)  # infeasible below lo, feasible at hi
    while lo < hi and hi - lo > tolerance * hi:
        mid = (lo + hi) // 2
        if cut_from_right(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    starts = cut_from_right(hi)
    assert starts is not None
    return starts


_WEIGHTS: dict[str, dict] = {"balanced": {"message_weight": MESSAGE_WEIGHT},
                             "work": {"message_weight": WORK_MESSAGE_WEIGHT, "holding_weight": WORK_HOLDING_WEIGHT}}


def _batch_entries(terms: TermMatrix) -> tuple[np.ndarray, np.ndarray]:
    return entry_rows(terms), terms.ids


class RangeDistribution(Distribution):
    """Consecutive term ranges: the ``keyword`` and ``prefix`` methods (see module docstring).

    ``use_prefix``: place subscriptions by their loose prefix (else all terms).
    ``use_summary``: keep keyword summaries and drop message copies no subscription can use.
    """

    def __init__(self, name: str, num_partitions: int, starts: np.ndarray, use_prefix: bool, use_summary: bool) -> None:
        self.name = name
        self.num_partitions = check_num_partitions(num_partitions)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.vocab_size = int(self.starts[-1])  # V0
        self.term_partition = np.repeat(np.arange(self.num_partitions, dtype=np.int32), np.diff(self.starts))
        self.use_prefix = bool(use_prefix)
        self.use_summary = bool(use_summary)
        self.table = SubscriptionTable() if (use_prefix or use_summary) else None
        self.holders = np.zeros(self.vocab_size, dtype=np.int64)  # registered subs holding each term
        self._new_live: list[np.ndarray] = []

    # ------------------------------------------------------------------ build
    @classmethod
    def _build(cls, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None,
               vocabulary: Vocabulary | None, thresholds: np.ndarray | None, *, name: str,
               use_prefix: bool, use_summary: bool, cut: str = "balanced") -> Self:
        num_partitions = check_num_partitions(num_partitions)
        if cut not in CUTS:
            raise invalid_choice("range cut", cut, CUTS)
        thresholds = check_thresholds(thresholds, len(subscriptions)) if use_prefix else None
        sizes = [len(vocabulary) if vocabulary is not None else 0, 1]
        for tm in [subscriptions.terms] + ([sample.terms] if sample is not None else []):
            if len(tm.ids):
                sizes.append(int(tm.ids.max()) + 1)
        vocab_size = max(sizes)
        lengths = loose_prefix_lengths(subscriptions.terms, subscriptions.alpha, thresholds)
        held = prefix_mask(subscriptions.terms, lengths)
        s_rows, s_terms = _batch_entries(subscriptions.terms)
        s_rows, s_terms = s_rows[held], s_terms[held]
        if sample is not None:
            m_rows, m_terms = _batch_entries(sample.terms)
        else:
            m_rows = m_terms = np.zeros(0, np.int64)
        live = np.zeros(vocab_size, bool)  # terms held by some subscription
        live[s_terms] = True
        if use_summary:
            keep = live[m_terms]
            m_rows, m_terms = m_rows[keep], m_terms[keep]
        postings = None
        if cut in ("balanced", "work") and sample is not None:
            # the model's subscriptions: every one, or every step-th (the cost of a call)
            step = max(1, -(-len(subscriptions) // MODEL_SUBSCRIPTIONS))
            model = np.arange(0, len(subscriptions), step)
            model_terms = subscriptions.terms.take(model)
            model_held = prefix_mask(model_terms, lengths[model])
            postings = RangePostings(vocab_size, entry_rows(model_terms)[model_held], model_terms.ids[model_held],
                                     model_terms, sample.terms, live if use_summary or use_prefix else None,
                                     scale=step, **_WEIGHTS[cut])
        if postings is not None and postings(0, vocab_size) > 0:
            starts = balanced_ranges(postings, vocab_size, num_partitions, tolerance=CUT_TOLERANCE)
        else:  # the paper's cut, or nothing to weigh the ranges with (no sample, no shared term)
            starts = keyword_ranges(vocab_size, num_partitions, s_rows, s_terms, m_rows, m_terms)
        dist = cls(name, num_partitions, starts, use_prefix, use_summary)
        if dist.table is not None:
            dist.route_subscriptions(subscriptions, thresholds)
            dist.pop_new_live_terms()
        return dist

    # ------------------------------------------------------------------ term -> partition
    def term_partitions(self, term_ids: np.ndarray) -> np.ndarray:
        """The partition owning each term id (unseen ids ``t >= V0``: ``(t - V0) mod P``)."""
        term_ids = np.asarray(term_ids, dtype=np.int64)
        if len(term_ids) == 0 or term_ids.max() < self.vocab_size:
            return self.term_partition[term_ids]
        out = np.empty(len(term_ids), dtype=np.int32)
        known = term_ids < self.vocab_size
        out[known] = self.term_partition[term_ids[known]]
        out[~known] = (term_ids[~known] - self.vocab_size) % self.num_partitions
        return out

    def _routing_of_entries(self, rows: np.ndarray, terms: np.ndarray, num_rows: int) -> Routing:
        parts = self.term_partitions(terms)
        if len(terms) and terms.max() >= self.vocab_size:
            return Routing.from_pairs(rows, parts, num_rows)
        # ranges are consecutive, so partitions ascend with term ids inside each row: no sort
        return Routing.from_sorted_pairs(rows, parts, num_rows)

    def _live(self, terms: np.ndarray) -> np.ndarray:
        if len(terms) == 0 or terms.max() < len(self.holders):
            return self.holders[terms] > 0
        out = np.zeros(len(terms), dtype=bool)
        inside = terms < len(self.holders)
        out[inside] = self.holders[terms[inside]] > 0
        return out

    # ------------------------------------------------------------------ summaries
    def _hold(self, terms: np.ndarray, delta: int) -> None:
        if len(terms) == 0:
            return
        top = int(terms.max()) + 1
        if top > len(self.holders):
            self.holders = np.concatenate([self.holders, np.zeros(top - len(self.holders), np.int64)])
        if delta > 0:
            uniq = np.unique(terms)
            newly = uniq[self.holders[uniq] == 0]
            if len(newly):
                self._new_live.append(newly)
        np.add.at(self.holders, terms, delta)

    def pop_new_live_terms(self) -> np.ndarray:
        if not self._new_live:
            return np.zeros(0, dtype=np.int64)
        out = np.unique(np.concatenate(self._new_live))
        self._new_live = []
        return out[self.holders[out] > 0]

    # ------------------------------------------------------------------ routing
    def route_subscriptions(self, batch: SubscriptionBatch, thresholds: np.ndarray | None = None) -> Routing:
        thresholds = check_thresholds(thresholds, len(batch))
        lengths = loose_prefix_lengths(batch.terms, batch.alpha, thresholds if self.use_prefix else None)
        held = prefix_mask(batch.terms, lengths)
        rows, terms = _batch_entries(batch.terms)
        routing = self._routing_of_entries(rows[held], terms[held], len(batch))
        homeless = np.flatnonzero(routing.counts() == 0)
        if len(homeless):  # no term at all: cannot match anything, but give it a home partition
            extra = Routing.from_pairs(homeless, hash_partition(batch.ids[homeless], self.num_partitions), len(batch))
            routing = routing.union(extra)
        if self.table is not None:  # register; an id seen before is replaced
            check_unique_ids(batch.ids)
            released = self._release(batch.ids)
            if self.use_summary:  # hold the new terms before releasing the old: no false "new"
                self._hold(terms[held], +1)
                self._hold(released, -1)
            self.table.add(batch, lengths)
        return routing

    def route_messages(self, batch: MessageBatch) -> Routing:
        rows, terms = _batch_entries(batch.terms)
        if self.use_summary:
            live = self._live(terms)
            rows, terms = rows[live], terms[live]
        return self._routing_of_entries(rows, terms, len(batch))

    def update_thresholds(self, sub_ids: np.ndarray, thresholds: np.ndarray) -> Routing:
        ids = np.asarray(sub_ids, dtype=np.int64).reshape(-1)
        theta = check_thresholds(thresholds, len(ids))
        if theta is None:                      # no pruning: every threshold at 0
            theta = np.zeros(len(ids))
        if self.table is None or not self.use_prefix or len(ids) == 0:
            return Routing.empty(len(ids))
        check_unique_ids(ids)
        slots = self.table.slots_of(ids)
        known = np.flatnonzero(slots >= 0)
        slots = slots[known]
        rec = self.table.records.take(slots)
        old_len = self.table.assigned[slots]
        new_len = np.maximum(old_len, loose_prefix_lengths(rec.terms, rec.alpha, theta[known]))
        rows, terms = _batch_entries(rec.terms)
        pos = np.arange(len(terms), dtype=np.int64) - rec.terms.indptr[rows]
        was_held = pos < old_len[rows]
        added = ~was_held & (pos < new_len[rows])
        self.table.assigned[slots] = new_len
        if self.use_summary:
            self._hold(terms[added], +1)
        width = np.int64(self.num_partitions)
        old_keys = rows[was_held] * width + self.term_partitions(terms[was_held])
        new_keys = np.setdiff1d(rows[added] * width + self.term_partitions(terms[added]), old_keys)
        return Routing.from_pairs(known[new_keys // width], new_keys % width, len(ids))

    def _release(self, sub_ids: np.ndarray) -> np.ndarray:
        """Unregister ids; returns the terms their assigned prefixes held."""
        assert self.table is not None, "a distribution with prefixes keeps a subscription table"
        slots = self.table.remove(np.asarray(sub_ids, dtype=np.int64).reshape(-1))
        if len(slots) == 0:
            return np.zeros(0, np.int64)
        rec = self.table.records.take(slots)
        return rec.terms.ids[prefix_mask(rec.terms, self.table.assigned[slots])]

    def remove_subscriptions(self, sub_ids: np.ndarray) -> None:
        if self.table is None:
            return
        released = self._release(sub_ids)
        if self.use_summary:
            self._hold(released, -1)

    # ------------------------------------------------------------------ reports
    def live_terms(self) -> np.ndarray:
        """Term ids currently held by some registered subscription (the summaries' union; empty
        when summaries are off)."""
        return np.flatnonzero(self.holders > 0)

    def describe(self) -> dict:
        sizes = np.diff(self.starts)
        return {**super().describe(), "vocabulary_size": self.vocab_size, "range_starts": self.starts.tolist(),
                "empty_ranges": int((sizes == 0).sum()), "loose_prefix": self.use_prefix,
                "summaries": self.use_summary, "live_terms": int((self.holders > 0).sum()) if self.use_summary else None}


class KeywordDistribution(RangeDistribution):
    """Eq. 16: every term places the subscription; no summaries (the paper's keyword method).

    >>> from skype.data import make_workload
    >>> w = make_workload("tweets", num_subs=200, num_messages=500, seed=1)
    >>> d = KeywordDistribution.build(8, w.subscriptions, w.messages, w.vocabulary)
    >>> bool((d.route_subscriptions(w.subscriptions).counts() <= w.subscriptions.terms.lengths()).all())
    True
    """

    @classmethod
    def build(cls, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None = None,
              vocabulary: Vocabulary | None = None, thresholds: np.ndarray | None = None, *,
              summary: bool = False, cut: str = "balanced") -> KeywordDistribution:
        """``thresholds`` are accepted for a uniform signature and ignored."""
        return cls._build(num_partitions, subscriptions, sample, vocabulary, None, name="keyword",
                          use_prefix=False, use_summary=summary, cut=cut)


class PrefixDistribution(RangeDistribution):
    """Eq. 18 / Lemma 7 with keyword summaries and lazy reallocation.

    >>> from skype.data import make_workload
    >>> w = make_workload("tweets", num_subs=200, num_messages=500, seed=1)
    >>> high = np.full(200, 0.95)  # high thresholds: short loose prefixes
    >>> d = PrefixDistribution.build(8, w.subscriptions, w.messages, w.vocabulary, high)
    >>> before = d.route_subscriptions(w.subscriptions, high)
    >>> grown = d.update_thresholds(w.subscriptions.ids, np.zeros(200))  # theta falls to 0
    >>> after = before.union(grown)
    >>> bool((after.counts() >= before.counts()).all()), int(grown.counts().sum()) > 0
    (True, True)
    >>> int(d.update_thresholds(w.subscriptions.ids, high).counts().sum())  # prefixes shrink: lazy
    0
    """

    @classmethod
    def build(cls, num_partitions: int, subscriptions: SubscriptionBatch, sample: MessageBatch | None = None,
              vocabulary: Vocabulary | None = None, thresholds: np.ndarray | None = None, *,
              summary: bool = True, cut: str = "balanced") -> PrefixDistribution:
        return cls._build(num_partitions, subscriptions, sample, vocabulary, thresholds, name="prefix",
                          use_prefix=True, use_summary=summary, cut=cut)
