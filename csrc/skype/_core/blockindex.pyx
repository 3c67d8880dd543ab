# cython: language_level=3
"""The keyword-first block index (``index="blocks"``), the default subscription index: its
dissemination.  The posting lists, their headers and their upkeep are ``blocklayout.BlockLayout``.

Dissemination.  For the message's terms t_j in ascending id (rarest first), with w_m = w(m, t_j)
and mx = max_{i > j} w(m, t_i): a subscription s met in t_j's list *for the first time* (no term
of s before t shares the message: checked from the terms stored in the posting, or from the
table beyond three terms) has its common terms among t and the terms after it, so

    TSim(s, m) <= min(1, w(s, t) * w_m + wtsum(s, pos + 1) * mx)
    ST(s, m)   <= alpha_s * SSim_ub + (1 - alpha_s) * TSim_ub

A posting of a subscription with at most three terms stores its other terms, so its own test
replaces mx by the largest message weight among the subscription's terms after t (0 when the
message has none of them): exact for one- and two-term subscriptions.

A header bounds every such member at once: with T from its w_max and rest_max, S from the MINDIST
of its MBR, the bound is linear in alpha, so its maximum over [alpha_min, alpha_max] is at an
end; the block (or band) is skipped when it is below theta_min - slack.  Entries of a
subscription met under an earlier term are bounded by nothing here and skipped: that earlier
meeting decided them (a skip there was a proof that they cannot qualify).  Each surviving entry
is tested with its own f32 bound, then verified with the exact double score (``_verify``); no
candidate state, no hash table.
"""
from libcpp.algorithm cimport sort as std_sort
from libc.math cimport INFINITY
from libc.stdint cimport uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, RectC, SubTermC, MsgTermC, prefetch
from skype._core.subindex cimport SubHotC
from skype._core.scoring cimport mindist2
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from skype._core.blocks cimport BlockEntryC, BlockHeadC, BandC, TermListC, below, below_ab, in_prefix
from skype._core.blocklayout cimport BlockLayout

cdef int VERIFY_AHEAD = 8               # records prefetched ahead in the verification loop
cdef double COLUMN_SLACK = 2e-5         # float arithmetic of the column test (errors ~1e-6)


cdef inline double clock_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1e9 + ts.tv_nsec


cdef class BlockIndex(BlockLayout):
    # ------------------------------------------------------------------ dissemination
    cdef inline bint _head_prunes(self, const BlockHeadC* h, double wm, double mx, double x,
                                  double y) noexcept nogil:
        """No live member met here for the first time can reach its threshold."""
        cdef double tt, d2
        cdef RectC mbr
        if h.theta_min == INFINITY:
            return True
        mbr.minx = h.minx
        mbr.miny = h.miny
        mbr.maxx = h.maxx
        mbr.maxy = h.maxy
        d2 = mindist2(&mbr, x, y)
        tt = h.w_max * wm + h.rest_max * mx
        if tt > 1.0:
            tt = 1.0
        # the bound is linear in alpha: below theta_min at both ends of [alpha_min, alpha_max]
        if (below(h.alpha_min, tt, d2, h.theta_min - self.slack, self.max_dist2)
                and below(h.alpha_max, tt, d2, h.theta_min - self.slack, self.max_dist2)):
            return True
        # low alpha: ST < theta  <=>  T + b S < a (Lemma 4's form); with b <= b_max < 1, S <= 1 -
        # d / MaxDist and a >= a_min; dividing by 1 - alpha > 1/2 at most doubles the slack
        if h.a_min == -INFINITY or h.b_max == INFINITY:
            return False
        return below_ab(tt, h.b_max, d2, h.a_min - 2.0 * self.slack, self.max_dist2)

    cdef inline bint _met_before(self, const BlockEntryC* e, const MsgTermC* m, int j) noexcept nogil:
        """Does the subscription share a term before t with the message (met in an earlier list)?"""
        cdef const SubHotC* h
        cdef const SubTermC* st
        cdef int i
        if e.pos == 0:
            return False
        if e.nterms <= 3:
            # other0 (and other1 when pos == 2) come before t
            return in_prefix(e.other0, m, j) or (e.pos == 2 and in_prefix(e.other1, m, j))
        if in_prefix(e.other0, m, j):
            return True
        if e.pos == 1:
            return False
        if in_prefix(e.other1, m, j):
            return True
        if e.pos == 2:
            return False
        h = &self.table.hot[e.sid]
        st = &self.table.terms[h.term_off]
        for i in range(e.pos - 2):
            if in_prefix(st[i].term, m, j):
                return True
        return False

    cdef inline double _text_after(self, const BlockEntryC* e, const MsgTermC* m, int j, int n,
                                   double mx) noexcept nogil:
        """An upper bound of max w(m, u) over the subscription's terms u after t (mx when they
        are not stored in the posting)."""
        cdef int after = <int>e.nterms - 1 - <int>e.pos
        cdef double best = 0.0
        cdef int i
        cdef uint32_t u
        if after <= 0:
            return 0.0
        if e.nterms > 3:
            return mx
        for i in range(j + 1, n):
            u = m[i].term
            if (u == e.other1 or (u == e.other0 and e.pos == 0)) and m[i].w > best:
                best = m[i].w
        return best

    cdef void _column_test(self, BandC* band, size_t start, size_t end, double wm, double mx,
                           double x, double y) noexcept nogil:
        """keep[i - start] = 0 when posting i certainly cannot qualify: the own bound of the
        posting in float arithmetic, branch-free over the block's columns, with COLUMN_SLACK more
        margin than the exact test (removed postings have theta = +inf and are ruled out)."""
        cdef const float* cx = band.col_x.data()
        cdef const float* cy = band.col_y.data()
        cdef const float* ca = band.col_alpha.data()
        cdef const float* ct = band.col_theta.data()
        cdef const float* cw = band.col_w.data()
        cdef const float* cr = band.col_rest.data()
        cdef uint8_t* keep = self.keep.data()
        cdef float fx = <float>x, fy = <float>y, fwm = <float>wm, fmx = <float>mx
        cdef float margin = <float>(self.slack + COLUMN_SLACK), fm2 = <float>self.max_dist2
        cdef float dx, dy, d2, tt, a, r
        cdef float one = 1.0, zero = 0.0
        cdef size_t i
        # no clamp of the text part at 1 here (a looser bound; survivors get the clamped one):
        # the loop stays free of branches and float-only, so the compiler vectorizes it
        for i in range(start, end):
            dx = cx[i] - fx
            dy = cy[i] - fy
            d2 = dx * dx + dy * dy
            tt = cw[i] * fwm + cr[i] * fmx
            a = ca[i]
            r = a + (one - a) * tt - ct[i] + margin
            keep[i - start] = (r >= zero) & (a * a * d2 <= r * r * fm2)

    cdef void _scan_band(self, BandC* band, const MsgTermC* m, int j, int nm, double x, double y,
                         double mx) noexcept nogil:
        """Term j of the message against one band of its list: first meetings that pass every
        bound go to ``pending`` (mx: the largest weight of the message's terms after j)."""
        cdef double wm = m[j].w
        cdef double dx, dy, tt, d2, theta, alpha
        cdef double slack = self.slack, max_dist2 = self.max_dist2
        cdef size_t b, i, end, nb = band.heads.size(), n = band.entries.size()
        cdef const BlockEntryC* e
        cdef bint entry_rule = self.rule_entry
        cdef bint columns = self.rule_entry and self.column_test
        cdef float th
        cdef uint64_t visited = 0, pruned = 0, revisits = 0
        cdef uint8_t* keep
        if band.head_stale:
            # raises lifted block minima: lift the band's
            th = INFINITY
            for b in range(nb):
                if band.heads[b].theta_min < th:
                    th = band.heads[b].theta_min
            band.head.theta_min = th
            band.head_stale = 0
        if self.rule_band and self._head_prunes(&band.head, wm, mx, x, y):
            self.ctr.bands_skipped += 1
            return
        if self.keep.size() < self.block_size:
            self.keep.resize(self.block_size)
        keep = self.keep.data()
        for b in range(nb):
            if self.rule_block and self._head_prunes(&band.heads[b], wm, mx, x, y):
                self.ctr.blocks_skipped += 1
                continue
            self.ctr.blocks_visited += 1
            end = (b + 1) * self.block_size
            if end > n:
                end = n
            visited += end - b * self.block_size
            if columns:
                self._column_test(band, b * self.block_size, end, wm, mx, x, y)
            for i in range(b * self.block_size, end):
                if columns and not keep[i - b * self.block_size]:
                    pruned += 1
                    continue
                e = &band.entries[i]
                if e.theta == INFINITY:
                    continue
                if entry_rule:
                    # the exact (double) test of a survivor
                    dx = e.x - x
                    dy = e.y - y
                    d2 = dx * dx + dy * dy
                    theta = e.theta - slack
                    alpha = e.alpha
                    tt = e.w * wm + e.rest * mx
                    if tt > 1.0:
                        tt = 1.0
                    if below(alpha, tt, d2, theta, max_dist2):
                        pruned += 1
                        continue
                    if e.rest > 0.0 and alpha < 1.0:
                        # refine with its own later terms
                        tt = e.w * wm + e.rest * self._text_after(e, m, j, nm, mx)
                        if tt > 1.0:
                            tt = 1.0
                        if below(alpha, tt, d2, theta, max_dist2):
                            pruned += 1
                            continue
                if self._met_before(e, m, j):
                    revisits += 1
                    continue
                self.pending.push_back(e.sid)
        self.ctr.entries_visited += visited
        self.ctr.entry_pruned += pruned
        self.ctr.revisits_skipped += revisits

    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        cdef int j, g
        cdef term_t t
        cdef double best = 0.0, t0 = 0, t1 = 0
        cdef TermListC* tl
        cdef uint64_t before
        if self.timed:
            t0 = clock_ns()
        self.out.clear()
        self.pending.clear()
        self.ctr.messages += 1
        self.m_maxwt.resize(n + 1)
        self.m_maxwt[n] = 0.0
        for j in range(n - 1, -1, -1):
            if m[j].w > best:
                best = m[j].w
            self.m_maxwt[j] = best
        for j in range(n):
            t = m[j].term
            if t >= self.lists.size():
                continue
            tl = &self.lists[t]
            if self.band_posts.size() < tl.bands.size():
                self.band_posts.resize(tl.bands.size(), 0)
            for g in range(<int>tl.bands.size()):
                if tl.bands[g].entries.size():
                    before = self.ctr.entries_visited
                    self._scan_band(&tl.bands[g], m, j, n, x, y, self.m_maxwt[j + 1])
                    self.band_posts[g] += self.ctr.entries_visited - before
        if self.timed:
            t1 = clock_ns()
            self.scan_ns += t1 - t0
        self._verify_all(self.pending.data(), self.pending.size(), m, n, x, y)
        if self.timed:
            self.verify_ns += clock_ns() - t1

    def set_timers(self, bint on):
        self.timed = on

    def phase_seconds(self):
        """Scan and verify clocks (one-at-a-time dissemination, timers on); {} when off."""
        return {"scan": self.scan_ns / 1e9, "verify": self.verify_ns / 1e9} if self.timed else {}

    def band_postings(self):
        """Postings examined individually, per alpha-band position (0: the lowest band)."""
        return [int(v) for v in self.band_posts]

    cdef void _verify_all(self, const sid_t* sids, size_t n, const MsgTermC* m, int nm, double x,
                          double y) noexcept nogil:
        cdef const SubHotC* hot = self.table.hot.data()
        cdef size_t i
        for i in range(n):
            if i + VERIFY_AHEAD < n:
                prefetch(&hot[sids[i + VERIFY_AHEAD]])
            if i + VERIFY_AHEAD // 2 < n:
                prefetch(&self.table.terms[hot[sids[i + VERIFY_AHEAD // 2]].term_off])
            self._verify(sids[i], x, y, m, nm)

    cdef void disseminate_batch(self, const MsgTermC* terms, const size_t* offs, const double* xs,
                                const double* ys, size_t n) noexcept nogil:
        """Micro-batching: each posting list is read for every message of the batch holding its
        term in a row (term-major order, while the list is in cache), then each message's first
        meetings are verified.  A scan depends only on its message and term, so every message
        gets the candidates its own disseminate() would (n < 65,536, terms per message too)."""
        cdef size_t i, q, p, start
        cdef int j, g, nm
        cdef uint64_t before
        cdef term_t t
        cdef double best
        cdef uint64_t key
        cdef const MsgTermC* m
        cdef TermListC* tl
        self.batch_out.clear()
        self.batch_off.clear()
        self.batch_off.push_back(0)
        self.ctr.messages += n
        self.b_maxwt.resize(offs[n] + n)
        self.b_keys.clear()
        for i in range(n):
            m = &terms[offs[i]]
            nm = <int>(offs[i + 1] - offs[i])
            best = 0.0
            self.b_maxwt[offs[i] + i + nm] = 0.0
            for j in range(nm - 1, -1, -1):
                if m[j].w > best:
                    best = m[j].w
                self.b_maxwt[offs[i] + i + j] = best
            for j in range(nm):
                self.b_keys.push_back((<uint64_t>m[j].term << 32) | (<uint64_t>i << 16) | <uint64_t>j)
        std_sort(self.b_keys.begin(), self.b_keys.end())
        self.pending.clear()
        self.b_msg.clear()
        for q in range(self.b_keys.size()):
            key = self.b_keys[q]
            t = <term_t>(key >> 32)
            if t >= self.lists.size():
                continue
            i = <size_t>((key >> 16) & 0xFFFF)
            j = <int>(key & 0xFFFF)
            m = &terms[offs[i]]
            nm = <int>(offs[i + 1] - offs[i])
            tl = &self.lists[t]
            if self.band_posts.size() < tl.bands.size():
                self.band_posts.resize(tl.bands.size(), 0)
            for g in range(<int>tl.bands.size()):
                if tl.bands[g].entries.size():
                    before = self.ctr.entries_visited
                    self._scan_band(&tl.bands[g], m, j, nm, xs[i], ys[i], self.b_maxwt[offs[i] + i + j + 1])
                    self.band_posts[g] += self.ctr.entries_visited - before
            self.b_msg.resize(self.pending.size(), <uint32_t>i)
        # the first meetings, message by message (a counting sort), then each message's checks
        self.b_end.assign(n + 1, 0)
        for p in range(self.pending.size()):
            self.b_end[self.b_msg[p] + 1] += 1
        for i in range(n):
            self.b_end[i + 1] += self.b_end[i]
        self.b_sorted.resize(self.pending.size())
        for p in range(self.pending.size()):
            i = self.b_msg[p]
            self.b_sorted[self.b_end[i]] = self.pending[p]
            self.b_end[i] += 1
        start = 0
        for i in range(n):
            self.out.clear()
            self._verify_all(&self.b_sorted[start] if self.b_end[i] > start else NULL, self.b_end[i] - start,
                             &terms[offs[i]], <int>(offs[i + 1] - offs[i]), xs[i], ys[i])
            start = self.b_end[i]
            self.batch_out.insert(self.batch_out.end(), self.out.begin(), self.out.end())
            self.batch_off.push_back(self.batch_out.size())

    cdef size_t memory(self) noexcept nogil:
        return BlockLayout.memory(self) + self.pending.capacity() * sizeof(sid_t)
