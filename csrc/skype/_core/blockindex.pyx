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

Column test (``column_test=True``).  A visited block is first filtered over the band's compact
hot columns (blocks.pxd ``ColGroupC``, scankernel.h): the same own bound in float arithmetic over
conservative 16-bit codes, with COLUMN_SLACK + ALPHA_CODE_SLACK more margin, so it keeps every
posting the exact own test keeps; the survivors (a compressed index list, no branch per posting)
take that exact test.  The kernel (AVX2 or portable, the same mask) is chosen at run time.
"""
from libcpp.algorithm cimport sort as std_sort
from libcpp.vector cimport vector
from libc.math cimport INFINITY
from libc.stdint cimport int64_t, uint16_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t, RectC, SubTermC, MsgTermC, prefetch
from skype._core.subindex cimport SubHotC, SubscriptionIndex
from skype._core.scoring cimport mindist2
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from skype._core.blocks cimport (BlockEntryC, BlockHeadC, BandC, TermListC, below, below_ab, in_prefix,
                                 skype_scan_query, scan_block, scan_kernel, scan_force, scan_has_avx2,
                                 code_w, code_rest, code_alpha, code_theta, decode_w, decode_rest,
                                 decode_alpha, decode_theta, ColGroupC, col_set, col_pad)
from skype._core.blocklayout cimport BlockLayout

cdef int VERIFY_AHEAD = 8               # records prefetched ahead in the verification loop
cdef double COLUMN_SLACK = 2e-5         # float arithmetic of the column test (errors ~1e-6)
cdef double ALPHA_CODE_SLACK = 1e-5     # alpha's 16-bit code: |error| <= 0.5 / 65535, times |S - T| <= 1
# the column kernel every BlockIndex uses: the CPU's best (AVX2 when it has it) unless a test
# forces the portable one (set_scan_kernel)
cdef int SCAN_KERNEL = scan_kernel()
# software prefetch of the next term's band records and this term's first lines (set_scan_prefetch;
# off: it has not won an A/B)
cdef bint SCAN_PREFETCH = False

cdef enum:
    VISIT_REMOVED = 0
    VISIT_PRUNED = 1
    VISIT_REVISIT = 2
    VISIT_PENDING = 3


KERNELS = ("portable", "avx2")


def available_scan_kernels():
    """The column kernels this CPU can run."""
    return KERNELS[:2] if scan_has_avx2() else KERNELS[:1]


def set_scan_kernel(str name):
    """Choose the column kernel of every block index: "auto" (the CPU's best), "portable" or
    "avx2" (E055 when the CPU lacks it).  A test hook: both keep the same postings."""
    global SCAN_KERNEL
    from skype.errors import InputError
    if name == "auto":
        scan_force(-1)
    elif name in available_scan_kernels():
        scan_force(KERNELS.index(name))
    else:
        raise InputError("E055", kernel=name, available=", ".join(available_scan_kernels()))
    SCAN_KERNEL = scan_kernel()


def set_scan_prefetch(bint on):
    """Turn the scan's software prefetch on or off (an A/B switch; answers do not change)."""
    global SCAN_PREFETCH
    SCAN_PREFETCH = on


def scan_kernel_name():
    """The column kernel in use."""
    return KERNELS[SCAN_KERNEL]


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

    cdef size_t _column_test(self, BandC* band, size_t start, size_t end, double wm, double mx,
                             double x, double y) noexcept nogil:
        """The postings of [start, end) the compact hot columns cannot rule out, into
        ``survivors`` (their count returned): each posting's own bound in float arithmetic over
        its conservative 16-bit codes (scankernel.h), with COLUMN_SLACK + ALPHA_CODE_SLACK more
        margin than the exact test; removed postings are never kept.  No clamp-free shortcut: the
        text part is clamped at 1 as in the exact test, so every posting the exact test keeps
        survives (the survivors then take that exact test)."""
        cdef skype_scan_query q
        q.fx = <float>x
        q.fy = <float>y
        q.wm = <float>wm
        q.mx = <float>mx
        q.margin = <float>(self.slack + COLUMN_SLACK + ALPHA_CODE_SLACK)
        q.max_dist2 = <float>self.max_dist2
        return scan_block(SCAN_KERNEL, band.cols.data(), start, end, &q, self.survivors.data())

    cdef inline int _visit(self, const BlockEntryC* e, const MsgTermC* m, int j, int nm, double x,
                           double y, double wm, double mx) noexcept nogil:
        """One posting's own exact (double) test: VISIT_REMOVED, VISIT_PRUNED, VISIT_REVISIT,
        or VISIT_PENDING (pushed to ``pending``)."""
        cdef double dx, dy, tt, d2, theta, alpha
        if e.theta == INFINITY:
            return VISIT_REMOVED
        if self.rule_entry:
            dx = e.x - x
            dy = e.y - y
            d2 = dx * dx + dy * dy
            theta = e.theta - self.slack
            alpha = e.alpha
            tt = e.w * wm + e.rest * mx
            if tt > 1.0:
                tt = 1.0
            if below(alpha, tt, d2, theta, self.max_dist2):
                return VISIT_PRUNED
            if e.rest > 0.0 and alpha < 1.0:
                # refine with its own later terms
                tt = e.w * wm + e.rest * self._text_after(e, m, j, nm, mx)
                if tt > 1.0:
                    tt = 1.0
                if below(alpha, tt, d2, theta, self.max_dist2):
                    return VISIT_PRUNED
        if self._met_before(e, m, j):
            return VISIT_REVISIT
        self.pending.push_back(e.sid)
        return VISIT_PENDING

    cdef void _scan_band(self, BandC* band, const MsgTermC* m, int j, int nm, double x, double y,
                         double mx) noexcept nogil:
        """Term j of the message against one band of its list: first meetings that pass every
        bound go to ``pending`` (mx: the largest weight of the message's terms after j).  With
        the column test, a block's hot columns are filtered first and only the survivors' fat
        postings are read."""
        cdef double wm = m[j].w
        cdef size_t b, i, s, lo, end, ns, nb = band.heads.size(), n = band.entries.size()
        cdef bint columns = self.rule_entry and self.column_test
        cdef float th
        cdef int v
        cdef uint64_t visited = 0, pruned = 0, revisits = 0, kept = 0
        cdef const uint32_t* surv
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
        if self.survivors.size() < self.block_size + 8:
            self.survivors.resize(self.block_size + 8)
        surv = self.survivors.data()
        for b in range(nb):
            if self.rule_block and self._head_prunes(&band.heads[b], wm, mx, x, y):
                self.ctr.blocks_skipped += 1
                continue
            self.ctr.blocks_visited += 1
            lo = b * self.block_size
            end = lo + self.block_size
            if end > n:
                end = n
            visited += end - lo
            if columns:
                ns = self._column_test(band, lo, end, wm, mx, x, y)
                kept += ns
                pruned += end - lo - ns
                for s in range(ns):
                    v = self._visit(&band.entries[surv[s]], m, j, nm, x, y, wm, mx)
                    pruned += v == VISIT_PRUNED
                    revisits += v == VISIT_REVISIT
            else:
                for i in range(lo, end):
                    v = self._visit(&band.entries[i], m, j, nm, x, y, wm, mx)
                    pruned += v == VISIT_PRUNED
                    revisits += v == VISIT_REVISIT
        self.ctr.entries_visited += visited
        self.ctr.entry_pruned += pruned
        self.ctr.revisits_skipped += revisits
        self.column_kept += kept

    cdef inline void _prefetch_bands(self, const MsgTermC* m, int j, int n) noexcept nogil:
        """Software prefetch, a term ahead: the band records of term j + 1, and the first lines
        of the headers and postings (or columns) of term j's bands (whose records were fetched
        a term earlier), so that a message's many short lists are fetched in parallel."""
        cdef const TermListC* tl
        cdef const BandC* band
        cdef int g
        if j + 1 < n and m[j + 1].term < self.lists.size():
            tl = &self.lists[m[j + 1].term]
            for g in range(<int>tl.bands.size()):
                prefetch(&tl.bands[g])
                prefetch(<const char*>&tl.bands[g] + 64)
        if m[j].term >= self.lists.size():
            return
        tl = &self.lists[m[j].term]
        for g in range(<int>tl.bands.size()):
            band = &tl.bands[g]
            prefetch(band.heads.data())
            if self.column_test and band.cols.size():
                prefetch(band.cols.data())
                prefetch(<const char*>band.cols.data() + 64)
            elif band.entries.size():
                prefetch(band.entries.data())
                prefetch(<const char*>band.entries.data() + 64)

    cdef void _scan_message(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        """Every band of every term of the message: first meetings to ``pending``."""
        cdef int j, g
        cdef term_t t
        cdef double best = 0.0
        cdef TermListC* tl
        cdef uint64_t before
        self.m_maxwt.resize(n + 1)
        self.m_maxwt[n] = 0.0
        for j in range(n - 1, -1, -1):
            if m[j].w > best:
                best = m[j].w
            self.m_maxwt[j] = best
        if SCAN_PREFETCH:
            for j in range(n):
                if m[j].term < self.lists.size():
                    prefetch(&self.lists[m[j].term])
            if n and m[0].term < self.lists.size():
                tl = &self.lists[m[0].term]
                for g in range(<int>tl.bands.size()):
                    prefetch(&tl.bands[g])
        for j in range(n):
            if SCAN_PREFETCH:
                self._prefetch_bands(m, j, n)
            t = m[j].term
            if t >= self.lists.size():
                continue
            tl = &self.lists[t]
            for g in range(<int>tl.bands.size()):
                if tl.bands[g].entries.size():
                    if self.band_posts.size() <= <size_t>tl.bands[g].band_id:
                        self.band_posts.resize(tl.bands[g].band_id + 1, 0)
                    before = self.ctr.entries_visited
                    self._scan_band(&tl.bands[g], m, j, n, x, y, self.m_maxwt[j + 1])
                    self.band_posts[tl.bands[g].band_id] += self.ctr.entries_visited - before

    cdef void disseminate(self, const MsgTermC* m, int n, double x, double y) noexcept nogil:
        cdef double t0 = 0, t1 = 0
        if self.timed:
            t0 = clock_ns()
        self.out.clear()
        self.pending.clear()
        self.ctr.messages += 1
        self._scan_message(m, n, x, y)
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

    def counters(self):
        """The dissemination counters, and ``column_kept``: postings the column test kept."""
        c = SubscriptionIndex.counters(self)
        c["column_kept"] = self.column_kept
        return c

    def reset_counters(self):
        SubscriptionIndex.reset_counters(self)
        self.column_kept = 0

    def scan_only(self, const int64_t[::1] indptr, const uint32_t[::1] terms, const double[::1] weights,
                  const double[::1] xs, const double[::1] ys, bint columns):
        """Bench hook: the posting scan of every message (terms ascending), no verification and
        nothing admitted, with or without the column test (columns=True needs an index built with
        column_test=True).  Returns (seconds, first meetings found)."""
        cdef vector[MsgTermC] m
        cdef size_t i, n = xs.shape[0], found = 0
        cdef int j, nm
        cdef double t0
        cdef bint saved = self.column_test
        if columns and not saved:
            from skype.errors import InputError
            raise InputError("E056", detail="scan_only(columns=True) needs an index built with column_test=True")
        self.column_test = columns
        t0 = clock_ns()
        with nogil:
            for i in range(n):
                nm = <int>(indptr[i + 1] - indptr[i])
                m.resize(nm)
                for j in range(nm):
                    m[j].term = terms[indptr[i] + j]
                    m[j].w = weights[indptr[i] + j]
                self.pending.clear()
                self._scan_message(m.data(), nm, xs[i], ys[i])
                found += self.pending.size()
        t0 = clock_ns() - t0
        self.column_test = saved
        return t0 / 1e9, found

    def band_postings(self):
        """Postings examined individually, per alpha-band (index: the band's id, 0 the lowest alphas)."""
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
            for g in range(<int>tl.bands.size()):
                if tl.bands[g].entries.size():
                    if self.band_posts.size() <= <size_t>tl.bands[g].band_id:
                        self.band_posts.resize(tl.bands[g].band_id + 1, 0)
                    before = self.ctr.entries_visited
                    self._scan_band(&tl.bands[g], m, j, nm, xs[i], ys[i], self.b_maxwt[offs[i] + i + j + 1])
                    self.band_posts[tl.bands[g].band_id] += self.ctr.entries_visited - before
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


def column_filter(str kernel, const float[::1] x, const float[::1] y, const double[::1] w,
                  const double[::1] rest, const double[::1] alpha, const double[::1] theta, double mx_,
                  double my_, double wm, double mx, double slack, double max_dist):
    """Test hook: encode postings' bound fields as the hot columns do and run one kernel over them
    with the margin ``_column_test`` uses for an index of this ``slack``; the survivors' indices."""
    cdef size_t i, n = x.shape[0]
    cdef vector[ColGroupC] groups
    cdef vector[uint32_t] out
    cdef skype_scan_query q
    cdef BlockEntryC e
    if kernel not in available_scan_kernels():
        from skype.errors import InputError
        raise InputError("E055", kernel=kernel, available=", ".join(available_scan_kernels()))
    groups.resize((n + 7) // 8)
    for i in range(groups.size()):
        col_pad(&groups[i])
    for i in range(n):
        e.x = x[i]
        e.y = y[i]
        e.w = <float>w[i]
        e.rest = <float>rest[i]
        e.alpha = <float>alpha[i]
        e.theta = <float>theta[i]
        col_set(groups.data(), i, &e)
    out.resize(n + 8)
    q.fx = <float>mx_
    q.fy = <float>my_
    q.wm = <float>wm
    q.mx = <float>mx
    q.margin = <float>(slack + COLUMN_SLACK + ALPHA_CODE_SLACK)
    q.max_dist2 = <float>(max_dist * max_dist)
    n = scan_block(KERNELS.index(kernel), groups.data(), 0, n, &q, out.data())
    return [int(out[i]) for i in range(n)]


def column_codes(double theta, double w, double rest, double alpha):
    """Test hook: the 16-bit codes of one posting's bound fields and the floats the kernels decode."""
    cdef uint16_t t = code_theta(theta), c_w = code_w(w), r = code_rest(rest), a = code_alpha(alpha)
    return {"theta": (t, decode_theta(t)), "w": (c_w, decode_w(c_w)), "rest": (r, decode_rest(r)),
            "alpha": (a, decode_alpha(a))}
