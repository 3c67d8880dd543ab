# The cone-bounded index (index="cone"): dissemination over conetree.ConeLayout; see coneindex.pyx.
from libcpp.vector cimport vector
from libc.stdint cimport uint32_t, uint64_t
from skype._core.types cimport sid_t, MsgTermC
from skype._core.conetree cimport ConeLayout, ConePostC, ConeTermC, PairEntC


ctypedef vector[PairEntC]* PairListP


cdef struct PairCandC:          # a pair entry met by the scan: its pair bound, compared once prefetched
    sid_t sid
    uint32_t gen
    double bound


cdef class ConeIndex(ConeLayout):
    cdef vector[sid_t] pending          # this message's survivors, verified together at the end
    cdef vector[uint64_t] pending_ver   # each survivor's posting version (NO_CHECK: checked already)
    cdef vector[uint64_t] level, following           # the walk's scratch: q << 32 | wide node of term q
    cdef vector[uint32_t] leaves                     # q, lo, hi of each passing leaf
    cdef vector[uint32_t] mslots                     # the message terms' slots
    cdef vector[uint64_t] survivors                  # q << 32 | posting of term q in the cone
    cdef vector[PairListP] plists_found              # the message's pair lists (non-empty)
    cdef vector[uint64_t] plist_r                    # and their pair of message terms: q << 32 | r
    cdef vector[PairCandC] pair_cands
    cdef uint64_t nodes_tested, tree_read, tail_read, flat_read, pair_entries_read
    cdef uint64_t pair_pruned           # pair entries the pair bound skipped
    cdef uint64_t node_lines, key_lines, meta_lines, pair_lines   # cache lines touched (spans of records read)
    cdef bint pair_bound_on             # the pair bound (on; off only to A/B it: set_pair_bound)
    cdef bint timed
    cdef double scan_ns, verify_ns

    cdef bint _first_common(self, sid_t sid, uint32_t t, const MsgTermC* m, int n) noexcept nogil
    cdef void _survivor(self, const ConePostC* p, const MsgTermC* m, int n) noexcept nogil
    cdef void _lanes(self, ConeTermC* ct, int q, uint32_t lo, uint32_t hi, double x, double y,
                     double wm) noexcept nogil
    cdef uint64_t _trees(self, const MsgTermC* m, int n, double x, double y) noexcept nogil
    cdef void _scan(self, const MsgTermC* m, int n, double x, double y) noexcept nogil
    cdef void _verify_pending(self, const MsgTermC* m, int n, double x, double y) noexcept nogil
