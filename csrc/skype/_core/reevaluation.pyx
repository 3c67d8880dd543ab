# cython: language_level=3
"""Re-evaluation: a buffer rebuilt from the message index in exact ranking order (spec §4, Alg. 2).

The base class of Buffers (buffers.pyx, which admits, expires and floors; it re-evaluates when a
buffer can no longer vouch for its top-k, and at registration); storage, holder handles, events
and theta publication are BufferStore's (bufstore.pyx).  ``_pull`` draws messages in ranking
order (score desc, seq desc: a total order) and chooses theta while it pulls:

* ``exact`` and ``kmax``: the first cap = k (kmax: max(kmax, k)) messages; theta = the last one's
  score.
* ``skyband``: the first k; theta = ``skyband_ratio`` * kScore.
* ``cskyband``: one traversal chooses theta by the cost model of §4.3 (costmodel.pxd): after each
  of the first ``nmax_factor * k`` messages from the k-th on, the cost of a threshold at its score
  (C_q: the subscription's mean query work, else the mean of all, scaled by ``query_cost``); the
  scan stops after ``stop_after`` consecutive rises.  ``plan_constrained``: the best was the k-th.

Then it pulls the ties of theta (skyband kinds: every message down to theta).  A pull that runs
out of messages before theta is chosen leaves the buffer *complete* (every match, theta = 0),
and so does a cSkyband pull that runs out when keeping them all costs no more.  ``_rebuild``
keeps the pulled messages scoring >= theta: exact and kmax all of them, the skyband kinds their
k-skyband with dominance counters (one pass keeping the k newest seqs seen in a min-heap: a
message is dominated by those newer among the higher-ranked).  It records the plan the admission
path checks (``p_theta``, ``born``, ``retune_at``, ``refresh_at``), hands the holder handles over,
emits the difference of the old and new top-k as events (``_diff_events``, when re-evaluating on
the stream) and publishes theta.  Invariant: a rebuilt buffer is what the buffer kind's invariant
(buffers.pyx) requires of the current window, and theta is at most the k-th score.

Bulk registration (bulk.pyx) hands ``_reevaluate_from`` the first ``src_n`` messages of the
subscription's ranking order instead (``_next``): the same scan and the same buffer; past the end
of a truncated run the message index restarts and skips the run's messages.
"""
from libcpp.algorithm cimport sort as std_sort
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, uint16_t, uint32_t, uint64_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from skype._core.types cimport sid_t, seq_t
from skype._core.window cimport win_next_seq
from skype._core.subindex cimport SubHotC
from skype._core.bufstore cimport SubBufC
from skype._core.costmodel cimport threshold_cost


cdef class Reevaluation(BufferStore):
    cdef bint _next(self, seq_t* seq, double* score) noexcept nogil:
        """The next message in ranking order: from the message index, or from a bulk run (the
        first src_n messages of the same ranking order, bulk.pyx).  Past the end of a truncated
        run the message index is restarted and its first src_n messages skipped: they are the
        run's, in the same order, since (score desc, seq desc) is a total order."""
        cdef const SubHotC* h
        cdef size_t _
        if self.src == NULL:
            return self.msgs.query_next(seq, score)
        if self.src_pos < self.src_n:
            seq[0] = self._full_seq(self.src[self.src_pos].seq_lo)
            score[0] = self.src[self.src_pos].score
            self.src_pos += 1
            return True
        if not self.src_truncated:
            return False                            # the run holds every match
        h = &self.table.hot[self.src_sid]
        self.msgs.query_start(h.alpha, h.x, h.y, &self.table.terms[h.term_off], h.nterms)
        for _ in range(self.src_n):
            self.msgs.query_next(seq, score)
        self.src = NULL
        self.src_fell_back = True
        self.n_bulk_fallbacks += 1
        return self.msgs.query_next(seq, score)

    cdef bint _pull(self, sid_t sid, double* theta) noexcept nogil:
        """Fill ``pulled`` in ranking order and choose theta; True when the buffer is to hold
        every match (complete: theta = 0)."""
        cdef SubBufC* sb = &self.buf[sid]
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef int32_t k = sb.k, cap, rising = 0
        cdef seq_t seq
        cdef double score, c, prev_c = INFINITY, best_c = INFINITY, cq_cost
        cdef size_t n, best_n = 0, nmax
        self.pulled.clear()
        self.plan_constrained = False
        if self.src == NULL:
            self.msgs.query_start(h.alpha, h.x, h.y, &self.table.terms[h.term_off], h.nterms)
        else:
            self.src_pos = 0
            self.src_sid = sid
        theta[0] = 0.0
        if self.kind == BUF_EXACT or self.kind == BUF_KMAX:
            cap = self._cap(k)
            while <int32_t>self.pulled.size() < cap:
                if not self._next(&seq, &score):
                    return True
                self.pulled.push_back(PulledC(seq, score))
            theta[0] = self.pulled.back().score
            return False
        if self.kind == BUF_SKYBAND:
            while <int32_t>self.pulled.size() < k:
                if not self._next(&seq, &score):
                    return True
                self.pulled.push_back(PulledC(seq, score))
            theta[0] = self.skyband_ratio * self.pulled.back().score
        else:
            cq_cost = self.query_cost * (sb.cq if sb.cq > 0 else (self.cq_mean if self.cq_mean > 0 else 200.0))
            nmax = <size_t>self.nmax_factor * <size_t>k  # 64-bit: k and the factor are each 32-bit
            while True:
                if not self._next(&seq, &score):
                    # every match pulled: keep them all (theta = 0, never re-evaluated) unless a
                    # threshold scores better in the cost model
                    n = self.pulled.size()
                    if (<int32_t>n < k
                            or threshold_cost(&self.model, <double>self.window.count, <double>n, k, -1.0) <= best_c):
                        return True
                    break
                self.pulled.push_back(PulledC(seq, score))
                n = self.pulled.size()
                if <int32_t>n < k:
                    continue
                c = threshold_cost(&self.model, <double>self.window.count, <double>n, k, cq_cost)
                if c < best_c:
                    best_c = c
                    best_n = n
                rising = rising + 1 if c > prev_c else 0
                prev_c = c
                if rising >= self.stop_after or n >= nmax:
                    break
            theta[0] = self.pulled[best_n - 1].score
            self.plan_constrained = <int32_t>best_n == k
        # keep pulling ties (and, for skyband, everything down to theta)
        while self.pulled.back().score >= theta[0]:
            if not self._next(&seq, &score):
                break
            self.pulled.push_back(PulledC(seq, score))
        return False

    cdef void _reevaluate(self, sid_t sid, bint emit, bint notify) noexcept nogil:
        """_rebuild, timed when it runs on the stream (emit) and the timers are on."""
        cdef timespec a, b
        if not (self.timed and emit):
            self._rebuild(sid, emit, notify)
            return
        clock_gettime(CLOCK_MONOTONIC, &a)
        self._rebuild(sid, emit, notify)
        clock_gettime(CLOCK_MONOTONIC, &b)
        self.reeval_ns += (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)

    cdef void _reevaluate_from(self, sid_t sid, const RankedC* run, size_t n, bint truncated) noexcept nogil:
        """_reevaluate off the stream, with the first n messages of sid's ranking order given
        (bulk.pyx): the same scan and the same buffer, from ``run`` instead of the message index.
        ``truncated``: the window may hold more matches than the run (the scan then falls back,
        see _next)."""
        self.src = run
        self.src_n = n
        self.src_truncated = truncated
        self.src_fell_back = False
        self._reevaluate(sid, False, False)
        self.src = NULL

    cdef void _rebuild(self, sid_t sid, bint emit, bint notify) noexcept nogil:
        """Re-evaluate: pull (``_pull``), keep what the kind keeps above theta, record the plan,
        hand the holders over, emit the top-k's difference (``emit``) and publish theta.  Buffers
        extends it: a rebuild forgets the messages its floors skipped."""
        cdef SubBufC* sb
        cdef const BufEntryC* B
        cdef int32_t k
        cdef double theta = 0.0
        cdef bint complete
        cdef size_t i
        cdef BufEntryC e
        cdef uint32_t dc
        cdef uint64_t work
        cdef size_t n_above
        cdef vector[seq_t]* h = &self.heap
        sb = &self.buf[sid]
        B = self._entries(sb)
        k = sb.k
        # old state, for events and for the reverse map
        self.old_all.clear()
        for i in range(sb.size):
            self.old_all.push_back(B[i].seq_lo)
        self._remember_holds(sb)
        self.old_seqs.assign(self.old_all.begin(), self.old_all.begin() + (sb.size if <int32_t>sb.size < k else k))
        complete = self._pull(sid, &theta)
        self.last_scan = self.pulled.size()
        # rebuild: exact/kmax keep the pulled run; skyband kinds keep its k-skyband >= theta
        self.rebuilt.clear()
        h.clear()
        for i in range(self.pulled.size()):
            if not complete and self.pulled[i].score < theta:
                break
            if self.kind == BUF_EXACT or self.kind == BUF_KMAX:
                dc = 0
            else:
                dc = skyband_dominators(h, self.pulled[i].seq, k)
                if <int32_t>dc >= k:
                    continue
            e.score = self.pulled[i].score
            e.seq_lo = <uint32_t>self.pulled[i].seq
            e.dc = <uint16_t>dc
            self.rebuilt.push_back(e)
        # the plan the admission-rate check compares against: pulled messages above theta / |W|
        n_above = self.pulled.size()
        while n_above > 0 and not complete and self.pulled[n_above - 1].score < theta:
            n_above -= 1
        sb.p_theta = <float>(<double>n_above / (self.window.count if self.window.count else 1))
        sb.born = <uint32_t>win_next_seq(self.window)
        sb.admits = 0
        # A plan made while a count window fills is loose for the full window (theta <= the
        # kScore of a partial window, and the cost scan could not go below k): redo it when the
        # window has doubled.  Skyband (theta = ratio * kScore) is always in that situation.
        sb.retune_at = 0
        if not complete and (self.kind == BUF_SKYBAND or self.plan_constrained):
            if not self.count_window:
                sb.retune_at = <uint32_t>(2 * self.window.count)      # a time window that doubles
            elif self.window.count < self.model.window_n:
                sb.retune_at = <uint32_t>(2 * self.window.count if 2 * self.window.count < self.model.window_n
                                          else self.model.window_n)
        # a right-sized slot (the scratch vector has the largest size any re-evaluation needed)
        self._store(sb, self.rebuilt.data(), self.rebuilt.size())
        sb.complete = complete
        # a complete buffer that grows refresh_factor times past this size is re-evaluated
        sb.refresh_at = <uint32_t>min(self.refresh_factor * (sb.size if <int32_t>sb.size > k else k), 4294967295.0)
        self._hand_over_holds(sid)           # the reverse map follows the rebuilt buffer
        if emit:
            self._diff_events(sid, k)
        # work accounting for the cost model's C_q (a bulk run that sufficed made no query:
        # its C_q stays unknown, so the cost model uses the mean of real queries)
        if self.src == NULL:
            work = self.msgs.q_work
            sb.cq = <float>work if sb.cq <= 0 else 0.5 * sb.cq + 0.5 * work
            self.reeval_work += work
            self.n_queries += 1
            self.cq_mean += (work - self.cq_mean) / self.n_queries
        self._set_theta(sid, 0.0 if complete else theta, notify)

    cdef bint _contains(self, vector[uint32_t]* sorted_vals, uint32_t v) noexcept nogil:
        cdef size_t lo = 0, hi = sorted_vals.size(), mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if sorted_vals[0][mid] < v:
                lo = mid + 1
            else:
                hi = mid
        return lo < sorted_vals.size() and sorted_vals[0][lo] == v

    cdef void _diff_events(self, sid_t sid, int32_t k) noexcept nogil:
        cdef const SubBufC* sb = &self.buf[sid]
        cdef const BufEntryC* B = self._entries(sb)
        cdef size_t i, n_new = sb.size if <int32_t>sb.size < k else k
        self.new_seqs.clear()
        for i in range(n_new):
            self.new_seqs.push_back(B[i].seq_lo)
        std_sort(self.old_seqs.begin(), self.old_seqs.end())
        std_sort(self.new_seqs.begin(), self.new_seqs.end())
        for i in range(self.new_seqs.size()):
            if not self._contains(&self.old_seqs, self.new_seqs[i]):
                self._event(sid, 1, self.new_seqs[i])
        for i in range(self.old_seqs.size()):
            if not self._contains(&self.new_seqs, self.old_seqs[i]):
                self._event(sid, -1, self.old_seqs[i])

    # ------------------------------------------------------------------ Python access
    def set_window_estimates(self, double window_n, double p_arrival, double p_expiry):
        self.model.window_n = window_n
        self.model.p_arrival = p_arrival
        self.model.p_expiry = p_expiry
