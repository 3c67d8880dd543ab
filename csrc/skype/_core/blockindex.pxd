# The keyword-first block index (index="blocks"): dissemination over the posting lists of
# blocklayout.BlockLayout; see blockindex.pyx for the algorithm.
from libcpp.vector cimport vector
from libc.stdint cimport uint32_t, uint64_t
from skype._core.types cimport sid_t, MsgTermC
from skype._core.blocks cimport BlockEntryC, BlockHeadC, BandC
from skype._core.blocklayout cimport BlockLayout


cdef class BlockIndex(BlockLayout):
    # per-message scratch
    cdef vector[double] m_maxwt    # m_maxwt[j] = max weight of the message's terms j..n-1
    cdef vector[sid_t] pending     # first meetings that passed every bound, to verify
    cdef vector[uint32_t] survivors  # per block: postings the column test could not rule out
    cdef uint64_t column_kept      # postings the column test kept (all messages)
    # per-batch scratch (disseminate_batch)
    cdef vector[double] b_maxwt    # every message's m_maxwt, message i's from offs[i] + i
    cdef vector[uint64_t] b_keys   # (term, message, position) triples, in term order
    cdef vector[uint32_t] b_msg    # the message of each pending first meeting
    cdef vector[size_t] b_end      # per message: the end of its run in b_sorted
    cdef vector[sid_t] b_sorted    # pending first meetings, message by message
    # instruments: postings examined per alpha-band position, and (timed) scan / verify clocks
    cdef vector[uint64_t] band_posts
    cdef bint timed
    cdef double scan_ns, verify_ns

    cdef bint _head_prunes(self, const BlockHeadC* h, double wm, double mx, double x, double y) noexcept nogil
    cdef bint _met_before(self, const BlockEntryC* e, const MsgTermC* m, int j) noexcept nogil
    cdef double _text_after(self, const BlockEntryC* e, const MsgTermC* m, int j, int n, double mx) noexcept nogil
    cdef size_t _column_test(self, BandC* band, size_t start, size_t end, double wm, double mx,
                             double x, double y) noexcept nogil
    cdef void _prefetch_bands(self, const MsgTermC* m, int j, int n) noexcept nogil
    cdef void _scan_message(self, const MsgTermC* m, int n, double x, double y) noexcept nogil
    cdef int _visit(self, const BlockEntryC* e, const MsgTermC* m, int j, int nm, double x, double y,
                    double wm, double mx) noexcept nogil
    cdef void _scan_band(self, BandC* band, const MsgTermC* m, int j, int nm, double x, double y,
                         double mx) noexcept nogil
    cdef void _verify_all(self, const sid_t* sids, size_t n, const MsgTermC* m, int nm, double x,
                          double y) noexcept nogil
