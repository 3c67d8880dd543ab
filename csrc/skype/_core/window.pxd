# Window store: the messages of the sliding window, oldest first, in arrival order.
from libcpp.vector cimport vector
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from skype._core.types cimport term_t, sid_t, seq_t, ext_id_t, MsgTermC

cdef extern from *:
    """
    #define SKYPE_NO_HOLDER 0xFFFFFFFFu
    #define SKYPE_NO_ID_SLOT 0xFFFFFFFFu
    #define SKYPE_XCHUNK 16u
    """
    # a dropped reverse-map entry (its buffer evicted the message)
    const sid_t NO_HOLDER "SKYPE_NO_HOLDER"
    # an empty slot of the id set (id_slots)
    const uint32_t NO_ID_SLOT "SKYPE_NO_ID_SLOT"
    # words of an extra-holder chunk: a link to the message's next chunk, then 15 holders
    const uint32_t XCHUNK "SKYPE_XCHUNK"


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
    cdef vector[uint32_t] extra_of         # per ring slot: 0, or the word of its first extra chunk
    cdef vector[uint32_t] extra_end        # per ring slot: the word after its last extra holder
    cdef uint32_t* xpool                   # extra-holder chunks (XCHUNK words), own mapping
    cdef uint64_t xpool_cap                # words mapped
    cdef uint64_t xpool_top                # words handed out so far (chunk 0 is never used)
    cdef uint32_t xfree                    # first free chunk (linked through word 0), 0: none
    cdef uint64_t xlive                    # chunks in use
    cdef uint64_t xfreed                   # chunks freed since the last sweep of empty pages
    cdef vector[uint16_t] page_live        # per 4-KB page of the pool: chunks in use
    cdef vector[uint8_t] page_out          # per page: handed back to the OS (reads as zeros)
    cdef seq_t found_upto                  # messages below: no holders kept (found at expiry)
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

    cdef void add_holder(self, seq_t seq, sid_t sid) noexcept nogil
    cdef void drop_holder_of(self, seq_t seq, sid_t sid) noexcept nogil
    cdef void _grow_ring(self) noexcept nogil
    cdef void _grow_holders(self) noexcept nogil
    cdef uint32_t _take_chunk(self) noexcept nogil
    cdef void _give_chunks(self, uint32_t c) noexcept nogil
    cdef void _sweep_pages(self) noexcept nogil
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


cdef inline size_t win_extra_collect(WindowStore w, seq_t seq, vector[sid_t]* out) noexcept nogil:
    """Append the live holders of seq's extra list (a window message) to ``out``; returns the
    entries visited (live and dropped)."""
    cdef uint64_t slot = (w.head + (seq - w.oldest_seq)) & (w.ring.size() - 1)
    cdef uint32_t c = w.extra_of[slot], end = w.extra_end[slot], nxt, lim, i
    cdef size_t n = 0
    cdef sid_t sid
    while c:
        nxt = w.xpool[c]
        lim = end if nxt == 0 else c + XCHUNK
        for i in range(c + 1, lim):
            sid = w.xpool[i]
            if sid != NO_HOLDER:
                out.push_back(sid)
        n += lim - c - 1
        c = nxt
    return n


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
