# Message index over the window: one list per term in arrival order, in chunks with bounds.
from libcpp.vector cimport vector
from libc.stdint cimport uint16_t, uint32_t, uint64_t
from skype._core.types cimport seq_t, SubTermC
from skype._core.ranking cimport WindowRanking


cdef struct LEntryC:             # a window message in a term's list (12 bytes)
    uint32_t seq_lo              # low 32 bits of its seq (the window spans < 2^32 messages)
    uint16_t wq                  # its weight for the term in 1/65535ths, rounded up (entry_weight)
    uint16_t sig                 # bit entry_bit(u) set for each term u of the message
    uint16_t cx                  # its location's cell in a CELLS x CELLS grid over the bounds
    uint16_t cy


cdef inline uint16_t entry_bit(uint32_t t) noexcept nogil:
    """A term's bit in an entry's signature (a message without the bit does not hold the term)."""
    return <uint16_t>((<uint16_t>1) << ((t * <uint32_t>2654435761u) >> 28))


cdef inline double entry_weight(uint16_t wq) noexcept nogil:
    """The weight an entry stores: at least the message's weight for the term (weight_code)."""
    return wq * (1.0 / 65535.0)


cdef inline uint16_t weight_code(double w) noexcept nogil:
    """The smallest code whose entry_weight is >= w (w in [0, 1])."""
    cdef double q = w * 65535.0
    cdef uint16_t c
    if q >= 65535.0:
        return 65535
    if q <= 0.0:
        return 0
    c = <uint16_t>q
    while c < 65535 and entry_weight(c) < w:
        c += 1
    return c


cdef struct ChunkC:              # bounds of a run of consecutive positions (20 bytes)
    float minx                   # the messages' locations, rounded outward
    float miny
    float maxx
    float maxy
    float maxw                   # the largest w


cdef struct TermListC:
    vector[LEntryC] entries      # positions [off, end): entries[p - off]
    vector[ChunkC] chunks        # chunk c covers positions [c*CHUNK, (c+1)*CHUNK): chunks[c - off/CHUNK]
    vector[ChunkC] groups        # group g covers positions [g*GROUP, (g+1)*GROUP): groups[g - off/GROUP]
    uint64_t off                 # position of entries[0]; a multiple of CHUNK
    uint64_t head                # the oldest live position
    uint64_t end                 # one past the newest position


cdef enum:
    CHUNK = 64                   # positions under one chunk header
    GROUP = 4096                 # positions under one group header (64 chunks)


cdef class TermLists(WindowRanking):
    cdef vector[TermListC] lists             # per term id
    cdef uint64_t live_lists                 # lists holding at least one message
    cdef double grid_x, grid_y               # the grid's lower corner (the engine's bounds)
    cdef double cell_w, cell_h               # a cell's sides
    cdef double inv_w, inv_h
    cdef double cell_slack                   # cell edges widened by this (rounding of the edges)
    cdef bint signatures                     # entries bounded with their signatures (set_entry_signatures)
    cdef vector[uint16_t] q_bits             # per query term: its signature bit
    cdef uint64_t total_reads                # entries popped: their messages read from the window
    cdef uint64_t total_designated           # ... of them designated to the popped entry's term
    cdef uint64_t total_reported             # messages returned in ranking order
    cdef uint64_t total_entry_bounds         # entries bounded (pushed)
    cdef uint64_t total_pushes               # chunks and entries pushed (groups: at the query's start)

    cdef void insert(self, seq_t seq) noexcept nogil
    cdef void remove(self, seq_t seq) noexcept nogil
    cdef void query_start(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil
    cdef bint query_next(self, seq_t* seq, double* score) noexcept nogil
    cdef double _bound(self, const ChunkC* c, uint32_t qi, float w) noexcept nogil
    cdef double _entry_bound(self, const LEntryC* e, uint32_t qi) noexcept nogil
    cdef double _entry_text_bound(self, const LEntryC* e, uint32_t qi) noexcept nogil
    cdef uint16_t _cell(self, double v, double lo, double inv) noexcept nogil
