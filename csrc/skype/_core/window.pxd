# Window store: the messages of the sliding window, oldest first, in arrival order.
from libcpp.vector cimport vector
from libc.stdint cimport uint32_t, uint64_t, int64_t
from skype._core.types cimport term_t, sid_t, seq_t, ext_id_t, MsgTermC

cdef extern from *:
    """
    #define SKYPE_NO_HOLDER 0xFFFFFFFFu
    #define SKYPE_HOLD_EXTRA 0x80000000u
    #define SKYPE_HOLD_MASK 0x7FFFFFFFu
    #define SKYPE_NO_ID_SLOT 0xFFFFFFFFu
    """
    # a dropped reverse-map entry (its buffer evicted the message)
    const sid_t NO_HOLDER "SKYPE_NO_HOLDER"
    # holder handles: bit 31 set, an index into the message's extra list; else the low 31 bits
    # of an absolute position in the holder ring
    const uint32_t HOLD_EXTRA "SKYPE_HOLD_EXTRA"
    const uint32_t HOLD_MASK "SKYPE_HOLD_MASK"
    # an empty slot of the id set (id_slots)
    const uint32_t NO_ID_SLOT "SKYPE_NO_ID_SLOT"


ctypedef vector[sid_t]* HolderListP     # an extra-holder list


cdef struct MsgC:
    seq_t seq              # arrival number (dense: the window holds seq oldest..oldest+count-1)
    ext_id_t ext_id        # user-visible id
    double x
    double y
    double t               # timestamp
    uint64_t term_pos      # slot of its first term in the term ring (its terms never wrap)
    uint64_t hold_pos      # absolute position of its first admission holder in the holder ring
    uint32_t nterms
    uint32_t hold_n        # subscriptions that admitted it on arrival


cdef class WindowStore:
    cdef vector[MsgC] ring                 # message ring, capacity a power of two
    cdef vector[uint32_t] extra_of         # per ring slot: 0, or 1 + its list in extra_pool
    cdef vector[HolderListP] extra_pool    # holders added by re-evaluations (stable addresses)
    cdef vector[uint32_t] extra_free       # unused lists of extra_pool
    cdef vector[sid_t] no_extra            # always empty: the extra list of most messages
    cdef uint64_t head                     # ring index of the oldest message
    cdef uint64_t count                    # messages in the window
    cdef seq_t oldest_seq                  # seq of the oldest message (next seq = oldest_seq + count)
    cdef vector[MsgTermC] term_ring        # term ring (bip buffer: a message's terms never wrap)
    cdef uint64_t term_head                # slot of the oldest message's first term
    cdef uint64_t term_tail                # slot one past the newest message's terms
    cdef uint64_t live_terms               # terms of the window's messages
    cdef bint term_wrapped                 # the live terms run past the ring's end to its start
    cdef seq_t term_wrap_seq               # if so: the first message stored at the start
    cdef sid_t* hold_ring                  # admission holders, message after message (FIFO):
    cdef uint64_t hold_cap                 # a power of two of slots, in its own mapping (hugepages)
    cdef uint64_t hold_head
    cdef uint64_t hold_tail
    cdef vector[uint32_t] id_slots         # open-addressing set of ring slots keyed by ext_id
    cdef uint64_t id_mask                  # id_slots.size() - 1 (twice the ring's capacity)

    cdef uint32_t add_holder(self, seq_t seq, sid_t sid) noexcept nogil
    cdef void drop_holder(self, seq_t seq, uint32_t handle) noexcept nogil
    cdef void drop_holder_of(self, seq_t seq, sid_t sid) noexcept nogil
    cdef void _grow_ring(self) noexcept nogil
    cdef void _grow_holders(self) noexcept nogil
    cdef void _relayout_terms(self, uint64_t need) noexcept nogil
    cdef uint64_t _term_room(self, uint64_t n) noexcept nogil
    cdef void _id_insert(self, uint32_t slot) noexcept nogil
    cdef void _id_erase(self, uint32_t slot) noexcept nogil
    cdef bint _id_contains(self, int64_t ext_id) noexcept nogil
    cdef void _id_rebuild(self) noexcept nogil
    cdef seq_t append(self, ext_id_t ext_id, double x, double y, double t,
                      const MsgTermC* terms, uint32_t n) noexcept nogil
    cdef void pop_oldest(self) noexcept nogil


# Hot accessors as inline functions (cdef methods called across modules are not inlined).
cdef inline seq_t win_next_seq(WindowStore w) noexcept nogil:
    return w.oldest_seq + w.count


cdef inline MsgC* win_get(WindowStore w, seq_t seq) noexcept nogil:
    return &w.ring[(w.head + (seq - w.oldest_seq)) & (w.ring.size() - 1)]


cdef inline MsgC* win_oldest(WindowStore w) noexcept nogil:
    return &w.ring[w.head]


cdef inline const MsgTermC* win_terms(WindowStore w, const MsgC* m) noexcept nogil:
    return w.term_ring.data() + m.term_pos


cdef inline vector[sid_t]* win_extra_holders(WindowStore w, seq_t seq) noexcept nogil:
    cdef uint32_t e = w.extra_of[(w.head + (seq - w.oldest_seq)) & (w.ring.size() - 1)]
    if e == 0:
        return &w.no_extra
    return w.extra_pool[e - 1]


cdef inline sid_t win_holder_at(WindowStore w, uint64_t pos) noexcept nogil:
    return w.hold_ring[pos & (w.hold_cap - 1)]


cdef inline uint64_t win_id_hash(int64_t ext_id) noexcept nogil:
    """The id set's hash of an external id (Fibonacci hashing, high bits folded down)."""
    cdef uint64_t k = <uint64_t>ext_id * 0x9E3779B97F4A7C15ULL
    return k ^ (k >> 29)


cdef inline int64_t win_seq_of(WindowStore w, int64_t ext_id) noexcept nogil:
    """The seq of the window's message ``ext_id`` (one probe run of the id set), or -1 when no
    message of the window has that id."""
    cdef uint64_t i = win_id_hash(ext_id) & w.id_mask
    while w.id_slots[i] != NO_ID_SLOT:
        if w.ring[w.id_slots[i]].ext_id == ext_id:
            return <int64_t>w.ring[w.id_slots[i]].seq
        i = (i + 1) & w.id_mask
    return -1
