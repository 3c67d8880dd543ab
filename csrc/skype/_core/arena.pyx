# cython: language_level=3
"""Entry arena: the result buffers' entries in fixed-capacity slots, without a heap block each.

Size classes grow by about a quarter (4, 5, 6, 7, 8, 10, 12, 15, 18, 22, ...), so a buffer stored in
the smallest class that fits wastes under a quarter of its slot.  A class's slots sit in pages of
a power-of-two number of slots (about PAGE_BYTES each, or one slot when a slot is larger), so a
slot's address is two small-array loads and a shift away: the buffer record says (class, slot).
Pages are never moved, so an entry pointer stays valid until its own buffer changes slot.  Slots
given back are reused by their class; pages are freed with the arena.  Entries are 14-byte packed
records (score, low seq bits, a 16-bit dominance counter), against 16 bytes plus a 24-byte vector
header and an allocator header per buffer before.
"""
from libc.stdlib cimport malloc, free, abort
from libc.stdint cimport uint16_t, uint32_t

cdef uint32_t MAX_CAPACITY = 1u << 31


cdef class EntryArena:
    def __cinit__(self):
        cdef uint32_t c = 4, shift
        cdef size_t slot_bytes
        self.cap.push_back(0)                      # class 0 = NO_SLOT
        self.page_shift.push_back(0)
        while True:
            self.cap.push_back(c)
            slot_bytes = <size_t>c * sizeof(BufEntryC)
            shift = 0
            while (slot_bytes << (shift + 1)) <= PAGE_BYTES:
                shift += 1
            self.page_shift.push_back(shift)
            if c >= MAX_CAPACITY:
                break
            c = c + (c >> 2 if c >= 8 else 1)
        self.pages.resize(self.cap.size())
        self.free_slots.resize(self.cap.size())
        self.handed.resize(self.cap.size(), 0)
        self.live_slots = 0
        self.live_bytes = 0
        self.page_bytes = 0

    def __dealloc__(self):
        cdef size_t c, p
        for c in range(self.pages.size()):
            for p in range(self.pages[c].size()):
                free(self.pages[c][p])

    cdef uint16_t class_for(self, size_t n) noexcept nogil:
        """The smallest class whose slots hold n entries."""
        cdef size_t lo = 1, hi = self.cap.size() - 1, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.cap[mid] < n:
                lo = mid + 1
            else:
                hi = mid
        return <uint16_t>lo

    cdef SlotC take(self, uint16_t cls) noexcept nogil:
        cdef SlotC slot
        cdef size_t nbytes
        cdef BufEntryC* page
        slot.cls = cls
        slot.pad = 0
        if self.free_slots[cls].size():
            slot.index = self.free_slots[cls].back()
            self.free_slots[cls].pop_back()
        else:
            slot.index = self.handed[cls]
            if (slot.index >> self.page_shift[cls]) == self.pages[cls].size():
                nbytes = (<size_t>1 << self.page_shift[cls]) * self.cap[cls] * sizeof(BufEntryC)
                page = <BufEntryC*>malloc(nbytes)
                if page == NULL:
                    abort()                         # out of memory inside nogil code
                self.pages[cls].push_back(page)
                self.page_bytes += nbytes
            self.handed[cls] += 1
        self.live_slots += 1
        self.live_bytes += self.cap[cls] * sizeof(BufEntryC)
        return slot

    cdef void give(self, SlotC slot) noexcept nogil:
        if slot.cls == NO_SLOT:
            return
        self.free_slots[slot.cls].push_back(slot.index)
        self.live_slots -= 1
        self.live_bytes -= self.cap[slot.cls] * sizeof(BufEntryC)

    # ------------------------------------------------------------------ Python access
    def memory_bytes(self):
        cdef size_t total = self.page_bytes, c
        for c in range(self.cap.size()):
            total += self.pages[c].capacity() * sizeof(void*) + self.free_slots[c].capacity() * 4
        return total

    def stats(self):
        return {"live_slots": self.live_slots, "live_bytes": self.live_bytes, "page_bytes": self.page_bytes,
                "classes": self.cap.size() - 1}
