# Message index over the window: one list per term in arrival order, in chunks with bounds.
from libcpp.vector cimport vector
from libc.stdint cimport uint16_t, uint32_t, uint64_t
from skype._core.types cimport seq_t, SubTermC
from skype._core.ranking cimport WindowRanking


cdef struct LEntryC:             # a window message in a term's list (12 bytes)
    uint32_t seq_lo              # low 32 bits of its seq (the window spans < 2^32 messages)
    float w                      # its weight for the term, rounded up
    uint16_t cx                  # its location's cell in a CELLS x CELLS grid over the bounds
    uint16_t cy


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

    cdef void insert(self, seq_t seq) noexcept nogil
    cdef void remove(self, seq_t seq) noexcept nogil
    cdef void query_start(self, double alpha, double x, double y, const SubTermC* terms, int n) noexcept nogil
    cdef bint query_next(self, seq_t* seq, double* score) noexcept nogil
    cdef double _bound(self, const ChunkC* c, uint32_t qi, float w) noexcept nogil
    cdef double _entry_bound(self, const LEntryC* e, uint32_t qi) noexcept nogil
    cdef uint16_t _cell(self, double v, double lo, double inv) noexcept nogil
