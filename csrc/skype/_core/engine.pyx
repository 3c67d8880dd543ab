# cython: language_level=3
"""The core engine: one message at a time, expire then arrive (spec §2).

publish(m):
  1. expire: a count window of N drops its oldest while it holds N messages; a time window of T
     drops every message with timestamp <= t - T.  Each expired message leaves the message index
     first, then every buffer holding it (reverse map); a buffer that can no longer answer its
     top-k is re-evaluated against the message index, which no longer holds the message.
  2. arrive: the message enters the window store and the message index; the subscription index
     finds every subscription with ST(s, m) >= theta_s; each admits m into its buffer.
  3. the top-k events of the message are netted per (subscription, message) and appended to the
     output (at = the message's position in the batch; flush.pyx).
Micro-batching (``micro_batch`` > 1) runs step 2's dissemination for several messages at once,
against the thresholds before the batch (the index may read each posting list once for all of
them), then steps 1-3 message by message.  A candidate is admitted only if it still reaches its
subscription's current theta; a subscription whose theta fell during the batch (an expiry or a
re-evaluation) may have missed candidates, so its own batch candidates are ignored and every
later message of the batch is scored against it directly.  Admissions are exactly those of
message-by-message processing.
The batch API takes numpy arrays (terms in CSR form) and loops in C without the GIL.
"""
import numpy as np
cimport numpy as cnp
from libcpp.vector cimport vector
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from skype._core.arena cimport BufEntryC
from skype._core.bufstore cimport SubBufC
from skype._core.types cimport sid_t, seq_t, MsgTermC, prefetch, now_ns
from skype._core.scoring cimport outside_time_window, score_pair
from skype._core.window cimport (WindowStore, MsgC, NO_HOLDER, win_get, win_seq_of, win_oldest, win_terms, win_next_seq,
                                 win_extra_collect, win_holder_at)
from skype._core.msgindex cimport MessageIndex
from skype._core.termlists cimport TermLists
from skype._core.subindex cimport SubTable, SubscriptionIndex, SubHotC, CandC, CountersC
from skype._core.buffers cimport Buffers, EventC, prefetch_buffer, prefetch_admission
from skype._core.reevaluation cimport BUF_SKYBAND
from skype._core.bulk cimport bulk_capacity, bulk_replay, sample_then_rest
from skype._core.regsearch import buffer_state
from skype._core.regtree cimport RegistrationTree, order_batch, search_register
from skype._core.flush cimport TopkChanges

cnp.import_array()

cdef double DECAY = 1.0 - 1.0 / 10000.0     # time windows: arrival/expiry rates over ~10k events
cdef double RATE_PRIOR = 500.0              # pseudo-events of each kind in that estimate


cdef class CoreEngine:
    def __cinit__(self, tuple bounds, double max_dist, uint64_t count_window, double time_window,
                  SubscriptionIndex index, SubTable table, str buffer, dict buffer_params,
                  int message_leaf_capacity=64, object index_factory=None, bint reverse_map=True,
                  str message_index="lists", bint exact_holders=True):
        minx, miny, maxx, maxy = bounds
        self.window = WindowStore()
        if message_index == "lists":
            self.msgs = TermLists(self.window, max_dist, bounds)
        else:
            self.msgs = MessageIndex(self.window, minx, miny, maxx, maxy, max_dist, message_leaf_capacity)
        self.table = table
        self.index = index
        self.count_window = count_window
        self.time_window = time_window
        self.max_dist = max_dist
        window_n = <double>count_window if count_window else 1.0
        self.reverse_map = reverse_map
        self.find_registered = True
        self.expiry_candidates = 0
        self.changes = TopkChanges()
        self.buffers = Buffers(buffer, table, index, self.msgs, self.window, window_n,
                               count_window=count_window > 0, track_holders=reverse_map,
                               exact_holders=exact_holders, **buffer_params)
        self.arrival_ns = 0
        self.expiry_ns = 0
        self.arrivals = 0
        self.expirations = 0
        self.recent_arrivals = 0
        self.recent_expirations = 0
        # bulk registration (bulk.pyx): index_factory() builds an empty index of the engine's
        # kind over the same table; batches of at least bulk_min subscriptions into a non-empty
        # window use it, in passes whose heaps hold at most bulk_budget entries.  Not Skyband by
        # default: its rebuild needs every message down to ratio * kScore, often hundreds, so
        # most runs would fall back (measured: 70% at 2k, 52% at 4k, 40k subscriptions)
        self.index_factory = index_factory
        self.bulk_min = 2000
        self.bulk_skyband = False
        self.bulk_adapt = True
        self.bulk_budget = 16 << 20
        self.bulk_passes = 0
        self.bulk_subscriptions = 0
        self.bulk_ns = 0
        self.bulk_build_ns = 0
        self.bulk_offers = 0
        self.bulk_counters = {}
        self.reg_search = False
        self.search_stats = {}
        self.micro_batch = 1
        self.batch_rescored = 0
        self.timed = False
        self.enter_ns = self.disseminate_ns = self.admit_ns = self.flush_ns = 0
        self.holder_entries = self.holders_visited = self.holders_found = 0
        self.flushed_events = self.flushed_changes = 0

    # ------------------------------------------------------------------ the stream
    cdef void _expire_oldest(self) noexcept nogil:
        cdef MsgC* m = win_oldest(self.window)
        cdef seq_t seq = m.seq
        cdef uint64_t pos
        cdef size_t i
        cdef size_t n
        cdef sid_t sid
        cdef CountersC saved
        cdef size_t far, near
        cdef uint64_t visited, found
        self.msgs.remove(seq)
        self.buffers.flush_drops()          # those dropped since (re-evaluations, removals: bufstore.pyx)
        if not self.reverse_map or seq < self.window.found_upto:
            # No reverse map (or a message that was in the window when a batch registered in
            # bulk: window.pyx keeps none of its holders): every subscription holding m has
            # ST(s, m) >= theta_s (buffers.pyx keeps every entry >= theta), so disseminating m
            # again against the current thresholds reports each of them (and possibly some that
            # evicted m: no-ops).  The arrival counters are kept apart.
            saved = self.index.ctr
            self.index.disseminate(win_terms(self.window, m), <int>m.nterms, m.x, m.y)
            self.expiry_candidates += self.index.ctr.candidates - saved.candidates
            self.index.ctr = saved
            self.expiring.clear()
            for i in range(self.index.out.size()):
                self.expiring.push_back(self.index.out[i].sid)
            visited = self.holders_visited
            found = self.holders_found
            for i in range(self.expiring.size()):
                self._expire_from(self.expiring[i], seq)
            if self.reverse_map:    # no reverse-map entry was read: the holders found count alone
                self.holders_visited = visited + (self.holders_found - found)
            self.window.pop_oldest()
            self.expirations += 1
            self.recent_expirations += 1
            return
        # the live holders: the FIFO block, then the extra list, dead entries skipped (buffers.pyx
        # keeps both exact); their buffer records are fetched ahead_records holders ahead, their
        # entries ahead_entries (buffers.pxd)
        self.expiring.clear()
        for pos in range(m.hold_pos, m.hold_pos + m.hold_n):
            sid = win_holder_at(self.window, pos)
            if sid != NO_HOLDER:
                self.expiring.push_back(sid)
        self.holder_entries += m.hold_n + win_extra_collect(self.window, seq, &self.expiring)
        n = self.expiring.size()
        far = self.buffers.ahead_records
        near = self.buffers.ahead_entries
        for i in range(n if n < far else far):
            prefetch(&self.buffers.buf[self.expiring[i]])
        for i in range(n):
            if i + far < n:
                prefetch(&self.buffers.buf[self.expiring[i + far]])
            if i + near < n:
                prefetch_buffer(self.buffers, self.expiring[i + near])
            self._expire_from(self.expiring[i], seq)
        self.window.pop_oldest()
        self.expirations += 1
        self.recent_expirations += 1

    cdef inline void _expire_from(self, sid_t sid, seq_t seq) noexcept nogil:
        # exact holders: every live entry is a live subscription (drop_sub clears its entries)
        if not self.buffers.exact_holders and not self.table.hot[sid].alive:
            return
        self.holders_visited += 1
        if self.buffers.expire(sid, seq):
            self.holders_found += 1

    cdef void _expire_for(self, double t, bint arriving) noexcept nogil:
        cdef double start = now_ns()
        if self.count_window:
            if arriving:
                while self.window.count >= self.count_window:
                    self._expire_oldest()
        else:
            while self.window.count and outside_time_window(win_oldest(self.window).t, t, self.time_window):
                self._expire_oldest()
        self.expiry_ns += now_ns() - start

    cdef void _arrive(self, int64_t ext_id, double x, double y, double t,
                      const unsigned int* terms, const double* w, int n) noexcept nogil:
        """One arriving message (terms and weights as parallel arrays)."""
        cdef int j
        self.msg_terms.resize(n)
        for j in range(n):
            self.msg_terms[j].term = terms[j]
            self.msg_terms[j].pad = 0
            self.msg_terms[j].w = w[j]
        self._arrive_terms(ext_id, x, y, t, self.msg_terms.data(), n)

    cdef void _arrive_terms(self, int64_t ext_id, double x, double y, double t,
                            const MsgTermC* terms, int n) noexcept nogil:
        cdef double start = now_ns(), t1 = 0, t2 = 0
        cdef seq_t seq = self._enter(ext_id, x, y, t, terms, n)
        if self.timed:
            t1 = now_ns()
            self.enter_ns += t1 - start
        self.index.disseminate(terms, n, x, y)
        if self.timed:
            t2 = now_ns()
            self.disseminate_ns += t2 - t1
        self._admit_all(seq, self.index.out.data(), self.index.out.size(), False)
        if self.timed:
            self.admit_ns += now_ns() - t2
        self.arrivals += 1
        self.arrival_ns += now_ns() - start

    cdef seq_t _enter(self, int64_t ext_id, double x, double y, double t,
                      const MsgTermC* terms, int n) noexcept nogil:
        """The message enters the window store and the message index."""
        cdef seq_t seq
        if not self.count_window:
            # Time window: the cost model's N and the proportions of arrivals and expirations
            # over recent events (spec §4.4).  The estimate starts when expirations start (a
            # filling window says nothing about the steady state), from a neutral prior.
            if self.expirations:
                self.recent_arrivals = self.recent_arrivals * DECAY + 1.0
                self.recent_expirations *= DECAY
            self.buffers.model.window_n = <double>(self.window.count + 1)
            self.buffers.model.p_arrival = (self.recent_arrivals + RATE_PRIOR) / (
                self.recent_arrivals + self.recent_expirations + 2 * RATE_PRIOR)
            self.buffers.model.p_expiry = 1.0 - self.buffers.model.p_arrival
        seq = self.window.append(ext_id, x, y, t, terms, n)
        self.msgs.insert(seq)
        return seq

    cdef void _admit_all(self, seq_t seq, const CandC* cands, size_t n, bint batched) noexcept nogil:
        """Admit the message into every candidate's buffer.  batched: the candidates were found
        against the thresholds before the micro-batch (see the module docstring)."""
        cdef size_t i, nfell = self.buffers.fell.size() if batched else 0
        cdef sid_t sid
        cdef double score
        cdef const MsgC* m
        cdef const SubHotC* h
        # admissions are cache misses at scale: the buffer records ahead_records ahead, then
        # their entries ahead_entries ahead (reading a record's data pointer needs the record)
        cdef size_t far = self.buffers.ahead_records, near = self.buffers.ahead_entries
        for i in range(n if n < far else far):
            prefetch(&self.buffers.buf[cands[i].sid])
        for i in range(n):
            if i + far < n:
                prefetch(&self.buffers.buf[cands[i + far].sid])
            if i + near < n:
                prefetch_admission(self.buffers, cands[i + near].sid, cands[i + near].score)
            sid = cands[i].sid
            if batched:
                if nfell and sid < self.buffers.fell_stamp.size() and \
                        self.buffers.fell_stamp[sid] == self.buffers.batch_stamp:
                    continue                        # scored directly below
                if cands[i].score < self.table.hot[sid].theta:
                    continue                        # its theta rose earlier in the batch
            self.buffers.admit(sid, seq, cands[i].score)
        if nfell:
            m = win_get(self.window, seq)
            for i in range(nfell):
                sid = self.buffers.fell[i]
                h = &self.table.hot[sid]
                score = score_pair(h.alpha, h.x, h.y, &self.table.terms[h.term_off], h.nterms, m.x, m.y,
                                   win_terms(self.window, m), <int>m.nterms, self.max_dist)
                self.batch_rescored += 1
                if score >= h.theta:
                    self.buffers.admit(sid, seq, score)
        # the holder entries of the messages these admissions evicted, cleared in one prefetched
        # pass (bufstore.flush_drops): an eviction's cost is the arrival's, as with a handle
        self.buffers.flush_drops()

    cdef void _publish_micro(self, Py_ssize_t first, Py_ssize_t end, const int64_t* ids, const double* x,
                             const double* y, const double* t, const int64_t* indptr, const uint32_t* terms,
                             const double* weights) noexcept nogil:
        """Messages [first, end) as one micro-batch (see the module docstring)."""
        cdef double start = now_ns()
        cdef Py_ssize_t i
        cdef int64_t j
        cdef MsgTermC mt
        cdef seq_t seq
        cdef size_t b
        cdef double t1 = 0, t2
        self.batch_terms.clear()
        self.batch_offs.clear()
        self.batch_offs.push_back(0)
        self.batch_x.clear()
        self.batch_y.clear()
        mt.pad = 0
        for i in range(first, end):
            for j in range(indptr[i], indptr[i + 1]):
                mt.term = terms[j]
                mt.w = weights[j]
                self.batch_terms.push_back(mt)
            self.batch_offs.push_back(self.batch_terms.size())
            self.batch_x.push_back(x[i])
            self.batch_y.push_back(y[i])
        self.index.disseminate_batch(self.batch_terms.data(), self.batch_offs.data(), self.batch_x.data(),
                                     self.batch_y.data(), <size_t>(end - first))
        t2 = now_ns()
        self.arrival_ns += t2 - start
        if self.timed:
            self.disseminate_ns += t2 - start
        self.buffers.batch_stamp += 1
        if self.buffers.batch_stamp == 0:           # wrapped: forget every old stamp
            self.buffers.fell_stamp.assign(self.buffers.fell_stamp.size(), 0)
            self.buffers.batch_stamp = 1
        self.buffers.fell.clear()
        self.buffers.batching = True
        for i in range(first, end):
            self._expire_for(t[i], True)
            start = now_ns()
            b = <size_t>(i - first)
            seq = self._enter(ids[i], x[i], y[i], t[i], &self.batch_terms[self.batch_offs[b]],
                              <int>(self.batch_offs[b + 1] - self.batch_offs[b]))
            if self.timed:
                t1 = now_ns()
                self.enter_ns += t1 - start
            self._admit_all(seq, self.index.batch_out.data() + self.index.batch_off[b],
                            self.index.batch_off[b + 1] - self.index.batch_off[b], True)
            self.arrivals += 1
            t2 = now_ns()
            self.arrival_ns += t2 - start
            if self.timed:
                self.admit_ns += t2 - t1
            self._flush(i)
        self.buffers.batching = False

    cdef void _flush(self, int64_t at) noexcept nogil:
        """Net the events of one message per (subscription, message) and append them (flush.pyx)."""
        cdef vector[EventC]* ev = &self.buffers.events
        cdef double start
        if ev.size() == 0:
            return
        start = now_ns() if self.timed else 0
        self.buffers.resolve_events()          # events carry seqs until here (bufstore.pyx)
        self.flushed_events += ev.size()
        self.flushed_changes += self.changes.net(ev, at, self.table.ext_id.data())
        if self.timed:
            self.flush_ns += now_ns() - start

    def publish_batch(self, const int64_t[::1] ids, const double[::1] x, const double[::1] y,
                      const double[::1] t, const int64_t[::1] indptr, const uint32_t[::1] terms,
                      const double[::1] weights):
        """Publish messages in order; returns (at, sub, msg, entered) arrays of top-k changes."""
        cdef Py_ssize_t i, n = ids.shape[0], end
        cdef Py_ssize_t mb = <Py_ssize_t>self.micro_batch
        with nogil:
            if mb <= 1:
                for i in range(n):
                    self._expire_for(t[i], True)
                    self._arrive(ids[i], x[i], y[i], t[i], &terms[indptr[i]], &weights[indptr[i]],
                                 <int>(indptr[i + 1] - indptr[i]))
                    self._flush(i)
            else:
                i = 0
                while i < n:
                    end = i + mb if i + mb < n else n
                    self._publish_micro(i, end, &ids[0], &x[0], &y[0], &t[0], &indptr[0],
                                        &terms[0] if terms.shape[0] else NULL,
                                        &weights[0] if weights.shape[0] else NULL)
                    i = end
        return self.changes.take()

    def set_timers(self, bint on):
        """Per-phase clocks (stats()["phases"]): off by default, they cost two clock reads a phase."""
        self.timed = on
        self.buffers.timed = on
        if hasattr(self.index, "set_timers"):
            self.index.set_timers(on)

    def find_registered_holders(self, bint on):
        """True (default): a bulk registration keeps no holders for the messages then in the
        window (about 4 bytes for each of its buffered entries, at the registration's peak);
        they are found when each expires, by disseminating it again (a scan per expiry until
        those messages have left).  False: kept in the extra-holder pool."""
        self.find_registered = on

    def set_micro_batch(self, size_t messages):
        """Disseminate this many messages at once (1: one at a time)."""
        self.micro_batch = messages

    def advance(self, double t):
        """Time windows: expire every message with timestamp <= t - T."""
        with nogil:
            self._expire_for(t, False)
            self._flush(0)
        return self.changes.take()

    # ------------------------------------------------------------------ subscriptions
    def subscribe_batch(self, const int64_t[::1] ids, const double[::1] x, const double[::1] y,
                        const int64_t[::1] k, const double[::1] alpha, const int64_t[::1] indptr,
                        const uint32_t[::1] terms, const double[::1] weights):
        cdef Py_ssize_t i, n = ids.shape[0]
        cdef vector[sid_t] sids
        cdef sid_t sid
        self.table.reserve(n, terms.shape[0])
        with nogil:
            for i in range(n):
                sid = self.table.add(ids[i], x[i], y[i], <int32_t>k[i], alpha[i], &terms[indptr[i]],
                                     &weights[indptr[i]], <int>(indptr[i + 1] - indptr[i]))
                sids.push_back(sid)
        if (self.index_factory is not None and <size_t>n >= self.bulk_min and self.window.count > 0
                and (self.buffers.kind != BUF_SKYBAND or self.bulk_skyband)):
            self._subscribe_bulk(sids)
        else:
            with nogil:
                for i in range(n):
                    self.buffers.init_sub(sids[i])
        with nogil:
            if n:
                self.index.add_many(&sids[0], n)

    def export_state(self):
        """The subscriptions and their buffers (Engine.export_state): SubTable.export_rows and
        BufferStore.export_buffers, messages by window position."""
        rows = self.table.export_rows()
        return rows[1:], self.buffers.export_buffers(rows[0])

    def import_state(self, tuple rows, tuple buffers):
        """Register subscriptions with the buffers export_state wrote, not searched for: rows
        (SubTable.add_rows), buffers (BufferStore.import_buffers), then the index, as
        subscribe_batch does.  The caller checked the arrays and the window (Engine.import_state)."""
        cdef uint32_t[::1] sids = self.table.add_rows(*rows)
        self.buffers.import_buffers(sids, *buffers)
        with nogil:
            if sids.shape[0]:
                self.index.add_many(<sid_t*>&sids[0], sids.shape[0])

    cdef void _subscribe_bulk(self, vector[sid_t]& sids):
        """Initialise the buffers of a large batch from runs found by replaying the window
        (bulk.pyx) or by searching a static index of it (regtree.pyx, ``reg_search``)."""
        cdef size_t n = sids.size(), i, start
        cdef uint64_t used
        cdef vector[sid_t] rest
        cdef SubscriptionIndex tmp
        cdef RegistrationTree search = None
        cdef double t0 = now_ns()
        if self.find_registered and self.reverse_map:
            self.window.found_upto = win_next_seq(self.window)
        with nogil:
            sample_then_rest(self.buffers, self.table, sids, rest, self.bulk_adapt)
            order_batch(self.table, rest)       # by term and place: the runs do not depend on it
        # registration by search (regtree.pyx): one static index of the window, the replay's passes and runs
        search = None
        if self.reg_search and rest.size():
            search = RegistrationTree(self.window, self.max_dist)
            with nogil:
                search.build(self.table, rest.data(), rest.size())
        start = 0
        while start < rest.size():
            used = 0
            i = start
            while i < rest.size():
                used += bulk_capacity(self.buffers, self.table.hot[rest[i]].k)
                if used > self.bulk_budget and i > start:
                    break
                i += 1
            if search is not None:
                with nogil:
                    self.bulk_offers += search_register(self.buffers, search, self.table, &rest[start], i - start,
                                                        &self.bulk_build_ns)
                self.bulk_passes += 1
                start = i
                continue
            tmp = self.index_factory()
            with nogil:
                self.bulk_offers += bulk_replay(self.buffers, tmp, self.table, self.window, &rest[start],
                                                i - start, self.arrivals + self.bulk_passes, self.micro_batch,
                                                &self.bulk_build_ns)
            for key, v in tmp.counters().items():
                self.bulk_counters[key] = self.bulk_counters.get(key, 0) + v
            tmp = None
            self.bulk_passes += 1
            start = i
        if search is not None:
            for key, v in search.stats().items():      # the index is a transient: keep its largest size
                old = self.search_stats.get(key, 0)
                self.search_stats[key] = max(old, v) if key == "index_bytes" else old + v
            search = None
        self.bulk_subscriptions += n
        self.bulk_ns += now_ns() - t0

    def buffer_state(self, int64_t ext_id):
        """A subscription's whole buffer state (regsearch.buffer_state): tests compare paths."""
        return buffer_state(self.buffers, self.table.by_ext[ext_id])

    def reverse_map_mismatches(self):
        """(message, subscription) pairs on which the reverse map and the buffers disagree
        (bufstore.pyx; tests, exact holders: 0)."""
        return self.buffers.reverse_map_mismatches()

    def set_registration(self, str mode):
        """How a bulk registration finds each subscription's run: ``search`` a static index of
        the window, per-term k-d trees (regtree.pyx), or ``replay`` the window through a
        temporary index (bulk.pyx: the oracle of the search, which must give the same runs)."""
        if mode != "search" and mode != "replay":
            raise ValueError(f"registration {mode!r}: search or replay")
        self.reg_search = mode == "search"

    def configure_bulk(self, size_t min_batch, uint64_t budget_entries, int bulk_factor, bint skyband=False):
        """Bulk registration knobs: the smallest batch that uses it, the heap entries of one
        pass, the run length (times k, plus ties) of the skyband kinds (kept as given: by default
        cSkyband raises it to cover the scans of its first sample), and whether the Skyband
        buffer uses it."""
        self.bulk_min = min_batch
        self.bulk_budget = budget_entries
        self.buffers.bulk_factor = bulk_factor
        self.bulk_skyband = skyband
        self.bulk_adapt = False            # an explicit run length is kept as given

    def unsubscribe(self, int64_t ext_id):
        cdef sid_t sid = self.table.by_ext[ext_id]
        with nogil:
            self.index.remove(sid)
            self.buffers.drop_sub(sid)
            self.table.remove(sid)

    def set_floors(self, const int64_t[::1] ext_ids, const double[::1] floors, int side_list=32):
        """Per-subscription admission floors (buffers.pyx, set_floor); ``side_list``: skipped
        messages kept per subscription from now on, re-admitted by a lowered floor instead of a
        rebuild (0: always rebuild).  Returns the top-k changes of the buffers a lowered floor
        repaired, as (at, sub, msg, entered) arrays."""
        cdef Py_ssize_t i
        self.buffers.skipped_cap = side_list
        with nogil:
            for i in range(ext_ids.shape[0]):
                self.buffers.set_floor(self.table.by_ext[ext_ids[i]], floors[i])
            self._flush(0)
        return self.changes.take()

    # ------------------------------------------------------------------ queries
    def has_subscriptions(self, const int64_t[::1] ids):
        out = np.zeros(ids.shape[0], dtype=bool)
        cdef Py_ssize_t i
        for i in range(ids.shape[0]):
            out[i] = self.table.by_ext.count(ids[i]) > 0
        return out

    def window_has(self, const int64_t[::1] ids):
        return self.window.contains_ids(ids)

    def topk(self, int64_t ext_id):
        return self.buffers.topk(self.table.by_ext[ext_id])

    def topk_arrays(self, const int64_t[::1] ext_ids):
        """The top-k of many subscriptions as CSR arrays (indptr, message ids, scores)."""
        cdef Py_ssize_t i, n = ext_ids.shape[0]
        cdef vector[int64_t] ids
        cdef vector[double] scores
        indptr = np.zeros(n + 1, dtype=np.int64)
        cdef int64_t[::1] ip = indptr
        with nogil:
            for i in range(n):
                self.buffers.topk_into(self.table.by_ext[ext_ids[i]], &ids, &scores)
                ip[i + 1] = ids.size()
        return (indptr, np.asarray(<int64_t[:ids.size()]>ids.data()).copy() if ids.size() else np.zeros(0, np.int64),
                np.asarray(<double[:scores.size()]>scores.data()).copy() if scores.size() else np.zeros(0, np.float64))

    def topk_ranks(self, const int64_t[::1] ext_ids, const int64_t[::1] msg_ids):
        """Where message ``msg_ids[i]`` stands in the top-k of subscription ``ext_ids[i]``: its
        rank (0 is the best; -1 when it is not there) and its score (NaN when not), as two arrays.

        Each message's seq comes from the window's id set (-1: not in the window, so in no
        top-k); a top-k entry is matched by its seq's low 32 bits (unique in the window), so no
        entry's external id is read.  Consecutive pairs of one subscription read its buffer once."""
        cdef Py_ssize_t i, j, n = ext_ids.shape[0], top = 0
        if msg_ids.shape[0] != n:
            raise ValueError("ext_ids and msg_ids differ in length")
        rank = np.full(n, -1, dtype=np.int64)
        score = np.full(n, np.nan, dtype=np.float64)
        cdef int64_t[::1] rk = rank
        cdef double[::1] sc = score
        cdef const SubBufC* sb = NULL
        cdef const BufEntryC* B = NULL
        cdef int64_t target
        cdef uint32_t lo
        with nogil:
            for i in range(n):
                if i == 0 or ext_ids[i] != ext_ids[i - 1]:
                    sb = &self.buffers.buf[self.table.by_ext[ext_ids[i]]]
                    B = self.buffers._entries(sb)
                    top = sb.size if <int32_t>sb.size < sb.k else sb.k
                target = win_seq_of(self.window, msg_ids[i])
                if target < 0:
                    continue
                lo = <uint32_t>target
                for j in range(top):
                    if B[j].seq_lo == lo:
                        rk[i] = j
                        sc[i] = B[j].score
                        break
        return rank, score

    def topn(self, int64_t ext_id, Py_ssize_t n):
        """The n best window messages of a subscription (ids, scores), straight from the message
        index: exact, independent of the subscription's buffer."""
        cdef sid_t sid = self.table.by_ext[ext_id]
        cdef uint32_t off = self.table.hot[sid].term_off
        cdef seq_t seq
        cdef double score
        cdef vector[int64_t] ids
        cdef vector[double] scores
        with nogil:
            self.msgs.query_start(self.table.hot[sid].alpha, self.table.hot[sid].x, self.table.hot[sid].y,
                                  &self.table.terms[off], self.table.hot[sid].nterms)
            while <Py_ssize_t>ids.size() < n and self.msgs.query_next(&seq, &score):
                ids.push_back(win_get(self.window, seq).ext_id)
                scores.push_back(score)
        return np.array(ids, dtype=np.int64), np.array(scores, dtype=np.float64)

    def thresholds(self, const int64_t[::1] ids):
        out = np.empty(ids.shape[0], dtype=np.float64)
        cdef Py_ssize_t i
        for i in range(ids.shape[0]):
            out[i] = self.table.hot[self.table.by_ext[ids[i]]].theta
        return out

    def subscription_ids(self):
        cdef size_t sid
        return np.array([self.table.ext_id[sid] for sid in range(self.table.ext_id.size())
                         if self.table.hot[sid].alive], dtype=np.int64)

    def window_ids(self):
        return self.window.ext_ids()

    def window_memory_parts(self):
        """The window store's bytes by component (``WindowStore.memory_parts``)."""
        return self.window.memory_parts()
