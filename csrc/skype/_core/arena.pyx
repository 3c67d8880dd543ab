# cython: language_level=3
"""Entry arena: the result buffers' entries in fixed-capacity slots, without a heap block each.

Size classes grow by about a quarter (4, 5, 6, 7, 8, 10, 12, 15, 18, 22, ...), so a buffer stored in
the smallest class that fits wastes under a quarter of its slot.  A class's slots sit in pages of
a power-of-two number of slots (about PAGE_BYTES each, or one slot when a slot is larger), so a
slot's address is two small-array loads and a shift away: the buffer record says (class, slot).
Entries are 14-byte packed records (score, low seq bits, dominance counter).

A class that fills ``huge_after`` pages (8 by default, about 2 MB) moves to 2 MB pages aligned
on 2 MB and advised as transparent huge pages (``MADV_HUGEPAGE``; Linux), each holding as many
slots as fit (a division finds a slot's page, where small pages use a shift): its slots keep
their numbers, so no record changes.  At scale every
admission and expiry visit reads a random buffer, and with 4 KB pages each was also a TLB miss
(docs/results/2026-11-29-admissions.md).  Small classes keep small pages, so a small engine
holds no 2 MB page.

Invariant: every class is dense, its live slots are 0 .. handed - 1.  ``give`` fills the hole
with the class's last slot (one slot copy) and returns that slot's owner, whose record must then
name the hole (bufstore.pyx does it); pages past the last live slot are freed, all but one.  So
the arena holds the live slots plus at most two pages per class, whatever the history of buffer
sizes: with free lists instead, every class kept its high-water mark of slots, and buffers that
move between classes (a rebuild, a growth) left most of the arena free (measured in
docs/results.md, "Compact buffers").  An entry pointer stays valid until the next ``give`` in
its class: callers hold one only for their own buffer, between two calls that may move it.
"""
from libc.stdlib cimport malloc, free, abort
from libc.string cimport memcpy
from libc.stdint cimport uint16_t, uint32_t
from posix.stdlib cimport posix_memalign

cdef extern from *:
    """
    #include <sys/mman.h>
    static inline void skype_advise_huge(void* p, size_t n) {
    #ifdef MADV_HUGEPAGE
        madvise(p, n, MADV_HUGEPAGE);
    #endif
    }
    """
    void advise_huge "skype_advise_huge"(void* p, size_t n) noexcept nogil

cdef uint32_t MAX_CAPACITY = 1u << 31
cdef uint32_t huge_after_default = 8


def set_huge_after(uint32_t pages):
    """For tests and A/B benches: arenas created after this call move a class to 2 MB pages
    once it fills ``pages`` small pages (0: never)."""
    global huge_after_default
    huge_after_default = pages


cdef void* huge_page() noexcept nogil:
    cdef void* p = NULL
    if posix_memalign(&p, HUGE_BYTES, HUGE_BYTES) != 0:
        abort()                                 # out of memory inside nogil code
    advise_huge(p, HUGE_BYTES)
    return p


cdef class EntryArena:
    def __cinit__(self):
        cdef uint32_t c = 4, shift
        cdef size_t slot_bytes
        self.cap.push_back(0)                      # class 0 = NO_SLOT
        self.page_shift.push_back(0)
        self.per_page.push_back(1)
        while True:
            self.cap.push_back(c)
            slot_bytes = <size_t>c * sizeof(BufEntryC)
            shift = 0
            while (slot_bytes << (shift + 1)) <= PAGE_BYTES:
                shift += 1
            self.page_shift.push_back(shift)
            self.per_page.push_back(1u << shift)
            if c >= MAX_CAPACITY:
                break
            c = c + (c >> 2 if c >= 8 else 1)
        self.pages.resize(self.cap.size())
        self.owner.resize(self.cap.size())
        self.handed.resize(self.cap.size(), 0)
        self.huge.resize(self.cap.size(), 0)
        self.huge_after = huge_after_default
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

    cdef SlotC take(self, uint16_t cls, uint32_t owner) noexcept nogil:
        """A new slot of class cls for ``owner``: the class's next slot."""
        cdef SlotC slot
        cdef size_t nbytes
        cdef BufEntryC* page
        slot.cls = cls
        slot.pad = 0
        slot.index = self.handed[cls]
        if self._page_of(cls, slot.index) == self.pages[cls].size():
            if (not self.huge[cls] and self.huge_after and self.pages[cls].size() >= self.huge_after
                    and <size_t>self.cap[cls] * sizeof(BufEntryC) * 8 <= HUGE_BYTES):
                self._go_huge(cls)
        if self._page_of(cls, slot.index) == self.pages[cls].size():
            nbytes = self._page_bytes(cls)
            page = <BufEntryC*>(huge_page() if self.huge[cls] else malloc(nbytes))
            if page == NULL:
                abort()                         # out of memory inside nogil code
            self.pages[cls].push_back(page)
            self.page_bytes += nbytes
        self.handed[cls] += 1
        if self.owner[cls].size() < self.handed[cls]:
            self.owner[cls].resize(self.handed[cls])
        self.owner[cls][slot.index] = owner
        self.live_slots += 1
        self.live_bytes += self.cap[cls] * sizeof(BufEntryC)
        return slot

    cdef uint32_t give(self, SlotC slot) noexcept nogil:
        """Give a slot back: the class's last slot moves into it.  Returns the moved slot's
        owner (its record must now name ``slot.index``), or NO_OWNER when none moved."""
        cdef uint16_t cls = slot.cls
        cdef uint32_t last, moved = NO_OWNER
        cdef size_t keep
        if cls == NO_SLOT:
            return NO_OWNER
        last = self.handed[cls] - 1
        if slot.index != last:
            moved = self.owner[cls][last]
            memcpy(slot_entries(self, slot), self._at(cls, last), self.cap[cls] * sizeof(BufEntryC))
            self.owner[cls][slot.index] = moved
        self.handed[cls] = last
        self.live_slots -= 1
        self.live_bytes -= self.cap[cls] * sizeof(BufEntryC)
        # free the pages past the live ones, but one (a class at a page boundary would churn)
        keep = (<size_t>last + self.per_page[cls] - 1) // self.per_page[cls] + 1
        while self.pages[cls].size() > keep:
            free(self.pages[cls].back())
            self.pages[cls].pop_back()
            self.page_bytes -= self._page_bytes(cls)
        return moved

    cdef BufEntryC* _at(self, uint16_t cls, uint32_t index) noexcept nogil:
        cdef SlotC s
        s.cls = cls
        s.index = index
        s.pad = 0
        return slot_entries(self, s)

    cdef size_t _page_bytes(self, uint16_t cls) noexcept nogil:
        if self.huge[cls]:
            return HUGE_BYTES
        return (<size_t>1 << self.page_shift[cls]) * self.cap[cls] * sizeof(BufEntryC)

    cdef size_t _page_of(self, uint16_t cls, uint32_t index) noexcept nogil:
        if self.huge[cls]:
            return index // self.per_page[cls]
        return index >> self.page_shift[cls]

    cdef void _go_huge(self, uint16_t cls) noexcept nogil:
        """Move class cls to 2 MB pages, each holding as many slots as fit, copied in slot order,
        so every slot keeps its number (the records stay as they are)."""
        cdef size_t slot_bytes = <size_t>self.cap[cls] * sizeof(BufEntryC), i, _, nbig
        cdef uint32_t per = <uint32_t>(HUGE_BYTES // slot_bytes), handed = self.handed[cls]
        cdef vector[BufEntryC*] pages
        nbig = (handed + per - 1) // per
        if nbig == 0:
            nbig = 1
        for _ in range(nbig):
            pages.push_back(<BufEntryC*>huge_page())
        for i in range(handed):
            memcpy(pages[i // per] + (i % per) * self.cap[cls], self._at(cls, <uint32_t>i), slot_bytes)
        for i in range(self.pages[cls].size()):
            free(self.pages[cls][i])
        self.page_bytes -= self.pages[cls].size() * self._page_bytes(cls)
        self.pages[cls] = pages
        self.per_page[cls] = per
        self.huge[cls] = 1
        self.page_bytes += nbig * HUGE_BYTES

    # ------------------------------------------------------------------ Python access
    def memory_bytes(self):
        cdef size_t total = self.page_bytes, c
        for c in range(self.cap.size()):
            total += self.pages[c].capacity() * sizeof(void*) + self.owner[c].capacity() * 4
        return total

    def stats(self):
        """Counters; ``loose_classes``: classes holding more pages than their live slots need
        plus one (0 while every class is dense, the invariant above)."""
        cdef size_t c, loose = 0, per_page, pages = 0, paged = 0, huge = 0
        for c in range(1, self.cap.size()):
            huge += self.huge[c]
            pages += self.pages[c].size()
            paged += self.pages[c].size() > 0
            per_page = self.per_page[c]
            if self.pages[c].size() > (self.handed[c] + per_page - 1) // per_page + 1:
                loose += 1
        return {"live_slots": self.live_slots, "live_bytes": self.live_bytes, "page_bytes": self.page_bytes,
                "classes": self.cap.size() - 1, "loose_classes": loose, "pages": pages, "paged_classes": paged,
                "entry_bytes": sizeof(BufEntryC), "huge_classes": huge}
