# cython: language_level=3
"""Subscription table and the subscription-index base class (spec §3).

Table.  Subscriptions live in struct-of-arrays form, addressed by a slot ``sid`` (slots of
removed subscriptions are reused; a sid has at most ``SID_BITS`` bits).  Term lists are sorted
by term id, which is the global df-ascending order; per term position the table keeps the unit
weight and the suffix sum ``wtsum(s, i)`` (rounded up to float).  ``theta`` is the exact
dissemination threshold owned by the result buffer; ``theta_idx`` <= ``theta`` is the value the
index statistics currently reflect.

Index base.  Every subscription index (the block index in blockindex.pyx, IGPT/IPT in
igpt.pyx, CIQ in ciq.pyx) reports, for an arriving message, every subscription s with
ST(s, m) >= theta_s: its pruning rules only skip on upper bounds below theta, and each survivor
is verified here with its exact score (``_verify``), the one place where a candidate is
admitted.
"""
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from libc.string cimport memset
from skype._core.types cimport term_t, sid_t, ext_id_t, MsgTermC
from skype._core.scoring cimport score_pair, round_up

cdef uint32_t MAX_SUBSCRIPTIONS = 1u << SID_BITS


# =========================================================================== subscription table

cdef class SubTable:
    def __cinit__(self):
        self.dead_terms = 0
        self.live = 0

    cdef sid_t add(self, ext_id_t ext_id, double x, double y, int32_t k, double alpha,
                   const term_t* terms, const double* w, int n) noexcept nogil:
        cdef sid_t sid
        cdef int i
        cdef double suffix_sum = 0.0
        cdef uint32_t off = <uint32_t>self.terms.size()
        cdef SubHotC* h
        if self.free_sids.size():
            sid = self.free_sids.back()
            self.free_sids.pop_back()
        else:
            sid = <sid_t>self.ext_id.size()          # the caller checked capacity()
            self.ext_id.push_back(0)
            self.theta_idx.push_back(0)
            self.hot.resize(sid + 1)
        self.ext_id[sid] = ext_id
        self.theta_idx[sid] = 0.0
        h = &self.hot[sid]
        h.x = x
        h.y = y
        h.alpha = alpha
        h.k = k
        h.theta = 0.0
        h.term_off = off
        h.nterms = <uint16_t>n
        h.alive = 1
        h.leaf = 0
        self.terms.resize(off + n)
        for i in range(n - 1, -1, -1):
            self.terms[off + i].term = terms[i]
            self.terms[off + i].w = w[i]
            suffix_sum += w[i]
            self.terms[off + i].wtsum = round_up(suffix_sum)
        self.by_ext[ext_id] = sid
        self.live += 1
        return sid

    cdef void remove(self, sid_t sid) noexcept nogil:
        self.hot[sid].alive = 0
        self.dead_terms += self.hot[sid].nterms
        self.by_ext.erase(self.ext_id[sid])
        self.free_sids.push_back(sid)
        self.live -= 1
        if self.dead_terms > 1024 and self.dead_terms * 2 > self.terms.size():
            self.compact_terms()

    cdef void compact_terms(self) noexcept nogil:
        cdef vector[SubTermC] terms
        cdef sid_t sid
        cdef uint32_t i, off
        for sid in range(self.hot.size()):
            if not self.hot[sid].alive:
                continue
            off = self.hot[sid].term_off
            self.hot[sid].term_off = <uint32_t>terms.size()
            for i in range(self.hot[sid].nterms):
                terms.push_back(self.terms[off + i])
        self.terms.swap(terms)
        self.dead_terms = 0

    def reserve(self, size_t subs, size_t terms):
        """Room for ``subs`` more subscriptions with ``terms`` more terms (bulk registration)."""
        self.hot.reserve(self.hot.size() + subs)
        self.ext_id.reserve(self.ext_id.size() + subs)
        self.theta_idx.reserve(self.theta_idx.size() + subs)
        self.terms.reserve(self.terms.size() + terms)

    def capacity(self):
        """How many more subscriptions fit (sids are limited to SID_BITS bits)."""
        return MAX_SUBSCRIPTIONS - self.ext_id.size() + self.free_sids.size()

    cdef inline int term_pos(self, sid_t sid, term_t t) noexcept nogil:
        cdef uint32_t off = self.hot[sid].term_off, i
        for i in range(self.hot[sid].nterms):
            if self.terms[off + i].term == t:
                return <int>i
        return -1

    def add_rows(self, const int64_t[::1] ids, const double[::1] x, const double[::1] y, const int64_t[::1] k,
                 const double[::1] alpha, const int64_t[::1] indptr, const uint32_t[::1] terms,
                 const double[::1] weights):
        """Add checked rows (``export_rows``' columns, terms ascending); returns their slots."""
        import numpy as np
        cdef Py_ssize_t i, n = ids.shape[0]
        sids = np.empty(n, np.uint32)
        cdef uint32_t[::1] s_v = sids
        self.reserve(n, terms.shape[0])
        with nogil:
            for i in range(n):
                s_v[i] = self.add(ids[i], x[i], y[i], <int32_t>k[i], alpha[i], &terms[indptr[i]],
                                  &weights[indptr[i]], <int>(indptr[i + 1] - indptr[i]))
        return sids

    def export_rows(self):
        """The live subscriptions in slot order, as the engine gave them (Engine.export_state):
        (slots, ids, x, y, k, alpha, term indptr, term ids, unit weights)."""
        import numpy as np
        cdef size_t sid, i, n = 0, nt = 0, r = 0, o = 0
        for sid in range(self.hot.size()):
            if self.hot[sid].alive:
                n += 1
                nt += self.hot[sid].nterms
        slots = np.empty(n, np.uint32)
        ids = np.empty(n, np.int64)
        x = np.empty(n, np.float64)
        y = np.empty(n, np.float64)
        k = np.empty(n, np.int64)
        alpha = np.empty(n, np.float64)
        indptr = np.zeros(n + 1, np.int64)
        terms = np.empty(nt, np.uint32)
        weights = np.empty(nt, np.float64)
        cdef uint32_t[::1] s_v = slots, t_v = terms
        cdef int64_t[::1] i_v = ids, k_v = k, p_v = indptr
        cdef double[::1] x_v = x, y_v = y, a_v = alpha, w_v = weights
        with nogil:
            for sid in range(self.hot.size()):
                if not self.hot[sid].alive:
                    continue
                s_v[r] = <uint32_t>sid
                i_v[r] = self.ext_id[sid]
                x_v[r] = self.hot[sid].x
                y_v[r] = self.hot[sid].y
                k_v[r] = self.hot[sid].k
                a_v[r] = self.hot[sid].alpha
                for i in range(self.hot[sid].nterms):
                    t_v[o] = self.terms[self.hot[sid].term_off + i].term
                    w_v[o] = self.terms[self.hot[sid].term_off + i].w
                    o += 1
                r += 1
                p_v[r] = <int64_t>o
        return slots, ids, x, y, k, alpha, indptr, terms, weights

    def memory_bytes(self):
        return (self.hot.capacity() * sizeof(SubHotC) + self.ext_id.capacity() * 16
                + self.terms.capacity() * sizeof(SubTermC) + self.by_ext.size() * 32)


# =========================================================================== index base

cdef class SubscriptionIndex:
    cdef void add(self, sid_t sid) noexcept nogil:
        pass

    cdef void add_many(self, const sid_t* sids, size_t n) noexcept nogil:
        cdef size_t i
        for i in range(n):
            self.add(sids[i])

    cdef void remove(self, sid_t sid) noexcept nogil:
        pass

    cdef void theta_changed(self, sid_t sid) noexcept nogil:
        pass

    cdef double replay_raise_at(self, double theta_idx) noexcept nogil:
        """A bulk replay (bulk.pyx) raises a threshold many times: it tells the index of a raise
        only past this value.  A raise re-sorts the posting entries of the quadtree indexes, so
        they hear of it geometrically (past 1.25 theta_idx + 0.02)."""
        return 1.25 * theta_idx + 0.02

    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        pass

    cdef void disseminate_batch(self, const MsgTermC* terms, const size_t* offs, const double* xs,
                                const double* ys, size_t n) noexcept nogil:
        """disseminate() of n messages against the same thresholds, keeping every message's
        candidates (message i has terms[offs[i]:offs[i + 1]]).  An index may instead read its
        lists term by term across the messages; the candidates are the same."""
        cdef size_t i
        self.batch_out.clear()
        self.batch_off.clear()
        self.batch_off.push_back(0)
        for i in range(n):
            self.disseminate(&terms[offs[i]], <int>(offs[i + 1] - offs[i]), xs[i], ys[i])
            self.batch_out.insert(self.batch_out.end(), self.out.begin(), self.out.end())
            self.batch_off.push_back(self.batch_out.size())

    cdef void _verify(self, sid_t sid, double x, double y, const MsgTermC* m, int n) noexcept nogil:
        """Verification (spec §3.8): the exact score of a candidate from the two full term
        lists; the candidate is reported when it reaches theta_s.  Every index ends here."""
        cdef const SubHotC* h = &self.table.hot[sid]
        cdef CandC cand
        self.ctr.candidates += 1
        cand.score = score_pair(h.alpha, h.x, h.y, &self.table.terms[h.term_off], h.nterms, x, y, m, n,
                                self.max_dist)
        if cand.score >= h.theta:
            cand.sid = sid
            self.out.push_back(cand)
            self.ctr.admitted += 1

    cdef size_t memory(self) noexcept nogil:
        return 0

    def counters(self):
        c = self.ctr
        return {
            "messages": c.messages, "cells_visited": c.cells_visited, "cells_pruned": c.cells_pruned,
            "groups_visited": c.groups_visited, "groups_skipped": c.groups_skipped,
            "entries_cut": c.entries_cut, "entries_visited": c.entries_visited,
            "entry_pruned": c.entry_pruned, "prefix_pruned": c.prefix_pruned, "unseen_pruned": c.unseen_pruned,
            "candidates": c.candidates, "admitted": c.admitted,
            "blocks_visited": c.blocks_visited, "blocks_skipped": c.blocks_skipped,
            "bands_skipped": c.bands_skipped, "revisits_skipped": c.revisits_skipped,
        }

    def reset_counters(self):
        memset(&self.ctr, 0, sizeof(CountersC))

    def disseminate_only(self, const int64_t[::1] indptr, const uint32_t[::1] terms, const double[::1] weights,
                         const double[::1] xs, const double[::1] ys):
        """Bench hook: disseminate() every message (terms ascending) against the current
        thresholds, nothing admitted.  Returns (seconds inside disseminate(), the candidates as
        sorted rows message << 32 | sid)."""
        cdef vector[MsgTermC] m
        cdef size_t i, n = xs.shape[0], c
        cdef int j, nm
        cdef timespec a, b
        cdef double spent = 0.0
        cdef vector[uint64_t] found
        with nogil:
            for i in range(n):
                nm = <int>(indptr[i + 1] - indptr[i])
                m.resize(nm)
                for j in range(nm):
                    m[j].term = terms[indptr[i] + j]
                    m[j].w = weights[indptr[i] + j]
                clock_gettime(CLOCK_MONOTONIC, &a)
                self.disseminate(m.data(), nm, xs[i], ys[i])
                clock_gettime(CLOCK_MONOTONIC, &b)
                spent += (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)
                for c in range(self.out.size()):
                    found.push_back((<uint64_t>i << 32) | self.out[c].sid)
        return spent / 1e9, sorted(found)

    def memory_bytes(self):
        """Bytes held by the index structure (the subscription table not included)."""
        return self.memory()
