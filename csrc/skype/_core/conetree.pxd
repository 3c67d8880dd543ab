# The cone trees' layout (index="cone"): per-term k-d trees over (x, y, rho) with their tails, the
# flat lists and the pair index, and their upkeep; see conetree.pyx.  Dissemination: coneindex.pyx.
# Postings are split: the record (sid, other terms, version) and the cone fields four to a line.
from libcpp.vector cimport vector
from libcpp.unordered_map cimport unordered_map
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from skype._core.types cimport term_t, sid_t
from skype._core.subindex cimport SubscriptionIndex

cdef extern from *:
    """
    #define SKYPE_CONE_MAX_PAIR_TERMS 3
    #define SKYPE_CONE_NO_TERM 0xFFFFFFFFu
    #define SKYPE_CONE_PAIR_EMPTY 0xFFFFFFFFFFFFFFFFull
    """
    # subscriptions with at most this many terms (and alpha < 1) are in the trees and the pair index
    const int MAX_PAIR_TERMS "SKYPE_CONE_MAX_PAIR_TERMS"
    const term_t NO_TERM "SKYPE_CONE_NO_TERM"          # pads a posting's other terms
    const uint64_t PAIR_EMPTY "SKYPE_CONE_PAIR_EMPTY"  # an empty slot of the pair map


cdef struct ConePostC:         # 16 bytes: one term of a subscription in the term's tree or tail
    sid_t sid
    term_t other0            # the subscription's other terms (NO_TERM pads): the first-meeting
    term_t other1            # check without reading the table
    uint32_t ver             # live while it equals the subscription's version


cdef struct ConeFullC:         # a posting with its cone fields: the build's scratch (32 bytes)
    ConePostC post
    float x                  # location, nearest f32 (distances allow pos_slack)
    float y
    float rho                # rounded down, from theta_idx when posted
    float lam                # rounded up (+inf at alpha = 0)


cdef struct ConeNodeC:         # the build's scratch: bounds over the members' stored (f32) fields
    float minx
    float miny
    float maxx
    float maxy
    float rho_min
    float lam_max
    uint32_t lo              # members: posts[lo, hi) of the term's array
    uint32_t hi
    uint32_t right           # the right child's index (the left is the next node); NO_KIDS: a leaf


cdef extern from *:
    """
    #include <cstdint>
    /* 64 bytes on a line: both children's bounds, tested from the parent's line */
    struct alignas(64) ConeWideC { float minx[2], miny[2], maxx[2], maxy[2], rho_min[2], lam_max[2];
                                   uint32_t ref[2], cnt[2]; };
    /* 64 bytes on a line: the cone fields of four consecutive postings (struct of arrays) */
    struct alignas(64) ConeKeyLineC { float x[4], y[4], rho[4], lam[4]; };
    """
    ctypedef struct ConeWideC:     # child c: ref = wide node (cnt = 0) or first posting (cnt postings)
        float minx[2]
        float miny[2]
        float maxx[2]
        float maxy[2]
        float rho_min[2]
        float lam_max[2]
        uint32_t ref[2]
        uint32_t cnt[2]
    ctypedef struct ConeKeyLineC:
        float x[4]
        float y[4]
        float rho[4]
        float lam[4]


cdef struct FlatC:             # alpha = 1 or more than MAX_PAIR_TERMS terms: read whole
    sid_t sid
    uint32_t gen             # live while it equals the subscription's generation


cdef struct PairEntC:         # 36 bytes: a subscription holding both terms of the pair (t, u)
    sid_t sid
    term_t third             # the subscription's third term (NO_TERM: two terms)
    uint32_t gen
    float x                  # the score's fields for the pair bound (coneindex.pyx): location
    float y                  # and alpha to nearest (pos_slack and PAIR_SLACK allow for them),
    float alpha
    float b_t                # (1 - alpha) * w(s, t), (1 - alpha) * w(s, u) and (1 - alpha) * w(s, third)
    float b_u                # (0 without a third term), each rounded up
    float b_third


cdef struct PairSlotC:          # open addressing, linear probing
    uint64_t key             # t << 32 | u, t < u; PAIR_EMPTY: a free slot
    uint32_t list            # its entries: plists[list]


cdef struct ConeTermC:         # 104 bytes: what a scan reads of a term, two lines
    vector[ConePostC] posts  # [0, tree_n): the tree's members; [tree_n, size): the tail
    vector[ConeKeyLineC] keys    # the postings' cone fields, four a line (posting i: line i / 4, lane i % 4)
    vector[ConeWideC] wide       # the tree: wide node 0 holds the root's children
    vector[FlatC] flat
    uint32_t tree_n
    uint32_t dead            # killed postings and flat entries still stored


cdef class ConeLayout(SubscriptionIndex):
    cdef unordered_map[term_t, uint32_t] term_slot
    cdef vector[uint32_t] dense_slot  # term -> slot (NO_SLOT) for terms below DENSE_TERMS: one read
    cdef vector[ConeTermC] terms
    cdef vector[PairSlotC] pslots
    cdef vector[vector[PairEntC]] plists
    cdef uint64_t pmask
    cdef int pshift
    cdef uint64_t pair_lists, pair_live, pair_dead
    cdef vector[uint32_t] ver         # per sid: the version its live postings carry
    cdef vector[uint32_t] gen         # per sid: the generation its flat and pair entries carry
    cdef vector[uint8_t] present      # per sid: in the index
    cdef vector[uint32_t] touched     # terms that got postings since the last rebuild check
    cdef vector[uint8_t] touched_mark
    cdef int leaf
    cdef double rho_scale
    cdef double pos_slack             # >= the distance error of f32 locations: max|coordinate| * 2^-23
    cdef double reach
    cdef double theta_refresh
    cdef double tail_fraction
    cdef uint32_t tail_min
    cdef uint64_t rebuilds, reposts, rebuilt_postings
    cdef vector[ConeFullC] build_posts   # a rebuild's scratch: the term's live postings with their fields
    cdef vector[ConeNodeC] build_nodes   # and its binary tree, before the wide nodes are made from it

    cdef uint32_t _slot(self, term_t t) noexcept nogil
    cdef uint32_t _find_slot(self, term_t t) noexcept nogil
    cdef void _grow(self, sid_t sid) noexcept nogil
    cdef bint _in_tree(self, sid_t sid) noexcept nogil
    cdef void _post(self, sid_t sid, bint pairs) noexcept nogil
    cdef void _kill(self, sid_t sid, bint pairs) noexcept nogil
    cdef void _check_touched(self) noexcept nogil
    cdef void _pair_insert(self, uint64_t key, PairEntC e) noexcept nogil
    cdef void _pair_rehash(self, size_t cap) noexcept nogil
    cdef vector[PairEntC]* _pair_find(self, uint64_t key) noexcept nogil
    cdef void _pair_compact(self) noexcept nogil
    cdef void _rebuild_term(self, uint32_t slot) noexcept nogil
    cdef void _build_node(self, uint32_t lo, uint32_t hi) noexcept nogil
    cdef uint32_t _build_wide(self, ConeTermC* ct, uint32_t ni) noexcept nogil
