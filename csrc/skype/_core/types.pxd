# Shared C types of the core.  Term ids are the global (df-ascending) order; every term list
# is sorted by id.  Subscription slots (sid) index the subscription table.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

ctypedef uint32_t term_t     # term id = position in the global order (rarest first)
ctypedef uint32_t sid_t      # subscription slot in the subscription table
ctypedef uint64_t seq_t      # message arrival number (never reused)
ctypedef int64_t  ext_id_t   # user-visible id of a subscription or message


cdef struct RectC:
    double minx
    double miny
    double maxx
    double maxy


cdef struct MsgTermC:        # one term of a message (16 bytes)
    term_t term
    uint32_t pad
    double w                 # unit-normalised weight


cdef struct SubTermC:        # one term of a subscription (16 bytes)
    term_t term
    float wtsum              # suffix sum of the weights from this position, rounded up
    double w                 # unit-normalised weight


cdef extern from *:
    """
    #define SKYPE_PREFETCH(p) __builtin_prefetch((const void*)(p))
    """
    void prefetch "SKYPE_PREFETCH"(const void* p) noexcept nogil

cdef enum:
    PREFETCH_AHEAD = 4       # records fetched ahead in the hot loops


# a monotonic clock in nanoseconds, for the phase timers
cdef inline double now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1e9 + ts.tv_nsec
