# cython: language_level=3
"""Large arrays in their own mappings, on transparent huge pages where the kernel allows.

The engine's large arrays (the window's holder ring, the message index's rings, the buffers'
arena pages) are read at random, about a thousand lines a message at paper scale: on 4-KB pages
nearly every read misses the TLB.  ``advise_huge`` asks the kernel (Linux ``madvise(MADV_HUGEPAGE)``)
to back a range with 2-MB pages; with THP in ``madvise`` mode, as on most distributions, nothing
else gets them.  The advice only concerns whole 2-MB-aligned extents inside the range, so it is
applied to arrays of at least ``HUGE_MIN`` bytes.

``huge_alloc``/``huge_resize``/``huge_free`` keep an array in its own anonymous mapping: a resize
is ``mremap`` (the pages move, nothing is copied and the old and new arrays never coexist, so
growing a ring has no transient of twice its size), and freeing unmaps at once (nothing stays
resident in the heap).  Mappings start 2-MB aligned when huge pages are on.
``small_pages_alloc``/``small_pages_resize`` map an array the same way without the advice, for
arrays that hand single pages back while they live.  ``release_pages`` hands the whole pages
inside a range back to the OS (``MADV_DONTNEED``; they read as zeros afterwards).  Elsewhere
than Linux these fall back to malloc/realloc/free and the advice is a no-op.

``set_huge_pages(False)`` turns the advice off process-wide (for A/B measurements); arrays
already mapped keep theirs.
"""

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #if defined(__linux__)
    #ifndef _GNU_SOURCE
    #define _GNU_SOURCE
    #endif
    #include <sys/mman.h>
    #include <unistd.h>
    #define SKYPE_HAVE_MMAP 1
    #else
    #define SKYPE_HAVE_MMAP 0
    #endif
    #define SKYPE_HUGE_BYTES ((size_t)2 << 20)

    static int skype_huge_on = 1;
    static unsigned long long skype_huge_advised = 0;

    static void skype_advise_huge(void* p, size_t n) {
    #if SKYPE_HAVE_MMAP && defined(MADV_HUGEPAGE)
        size_t lo = ((size_t)p + SKYPE_HUGE_BYTES - 1) & ~(SKYPE_HUGE_BYTES - 1);
        size_t hi = ((size_t)p + n) & ~(SKYPE_HUGE_BYTES - 1);
        if (!skype_huge_on || hi <= lo) return;
        if (madvise((void*)lo, hi - lo, MADV_HUGEPAGE) == 0) skype_huge_advised += hi - lo;
    #else
        (void)p; (void)n;
    #endif
    }

    static void skype_release_pages(void* p, size_t n) {
    #if SKYPE_HAVE_MMAP
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t lo = ((size_t)p + page - 1) & ~(page - 1);
        size_t hi = ((size_t)p + n) & ~(page - 1);
        if (hi > lo) madvise((void*)lo, hi - lo, MADV_DONTNEED);
    #else
        (void)p; (void)n;
    #endif
    }

    static size_t skype_page_round(size_t n) {
        return (n + 4095) & ~(size_t)4095;
    }

    static void* skype_map_alloc(size_t n, int advise) {
    #if SKYPE_HAVE_MMAP
        size_t len = skype_page_round(n ? n : 1);
        size_t extra = advise && skype_huge_on && len >= SKYPE_HUGE_BYTES ? SKYPE_HUGE_BYTES : 0;
        char* p = (char*)mmap(NULL, len + extra, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        char* start;
        if (p == (char*)MAP_FAILED) return NULL;
        start = p;
        if (extra) {                            /* start on a 2-MB boundary, unmap the rest */
            start = (char*)(((size_t)p + extra - 1) & ~(extra - 1));
            if (start > p) munmap(p, (size_t)(start - p));
            if (start + len < p + len + extra)
                munmap(start + len, (size_t)(p + len + extra - (start + len)));
        }
        if (advise) skype_advise_huge(start, len);
        return start;
    #else
        (void)advise;
        return calloc(1, n ? n : 1);
    #endif
    }

    static void* skype_map_resize(void* p, size_t old_n, size_t new_n, int advise) {
    #if SKYPE_HAVE_MMAP
        void* q;
        if (p == NULL) return skype_map_alloc(new_n, advise);
        q = mremap(p, skype_page_round(old_n ? old_n : 1), skype_page_round(new_n ? new_n : 1),
                   MREMAP_MAYMOVE);
        if (q == MAP_FAILED) return NULL;
        if (advise) skype_advise_huge(q, new_n);
        return q;
    #else
        void* q;
        (void)advise;
        q = realloc(p, new_n ? new_n : 1);
        if (q != NULL && new_n > old_n) memset((char*)q + old_n, 0, new_n - old_n);
        return q;
    #endif
    }

    static void* skype_huge_alloc(size_t n) { return skype_map_alloc(n, 1); }
    static void* skype_huge_resize(void* p, size_t old_n, size_t new_n) {
        return skype_map_resize(p, old_n, new_n, 1);
    }

    static void skype_huge_free(void* p, size_t n) {
        if (p == NULL) return;
    #if SKYPE_HAVE_MMAP
        munmap(p, skype_page_round(n ? n : 1));
    #else
        (void)n;
        free(p);
    #endif
    }
    """
    int skype_huge_on
    unsigned long long skype_huge_advised
    void skype_advise_huge(void* p, size_t n) noexcept nogil
    void skype_release_pages(void* p, size_t n) noexcept nogil
    void* skype_huge_alloc(size_t n) noexcept nogil
    void* skype_huge_resize(void* p, size_t old_n, size_t new_n) noexcept nogil
    void* skype_map_alloc(size_t n, int advise) noexcept nogil
    void* skype_map_resize(void* p, size_t old_n, size_t new_n, int advise) noexcept nogil
    void skype_huge_free(void* p, size_t n) noexcept nogil


cdef void* huge_alloc(size_t nbytes) noexcept nogil:
    """A zeroed array of ``nbytes`` in its own mapping (2-MB aligned when huge pages are on);
    NULL when memory is exhausted."""
    return skype_huge_alloc(nbytes)


cdef void* huge_resize(void* p, size_t old_bytes, size_t new_bytes) noexcept nogil:
    """``p`` (from huge_alloc, ``old_bytes`` long) resized to ``new_bytes``, its contents kept and
    its pages moved, not copied; the new part reads as zeros.  NULL when memory is exhausted
    (``p`` is then unchanged)."""
    return skype_huge_resize(p, old_bytes, new_bytes)


cdef void* small_pages_alloc(size_t nbytes) noexcept nogil:
    """As huge_alloc, without the huge-page advice: for an array whose single 4-KB pages are
    handed back with release_pages while it lives (a huge page would only be split, and its
    memory kept, by the kernel)."""
    return skype_map_alloc(nbytes, 0)


cdef void* small_pages_resize(void* p, size_t old_bytes, size_t new_bytes) noexcept nogil:
    """As huge_resize, for an array from small_pages_alloc (no advice)."""
    return skype_map_resize(p, old_bytes, new_bytes, 0)


cdef void huge_free(void* p, size_t nbytes) noexcept nogil:
    """Unmap an array from huge_alloc/huge_resize or small_pages_alloc/small_pages_resize
    (``nbytes`` as last sized)."""
    skype_huge_free(p, nbytes)


cdef void advise_huge(void* p, size_t nbytes) noexcept nogil:
    """Ask for huge pages on the 2-MB-aligned extents inside ``[p, p + nbytes)`` (any memory: a
    malloc'd block, an arena page); a no-op when off or unavailable."""
    skype_advise_huge(p, nbytes)


cdef void release_pages(void* p, size_t nbytes) noexcept nogil:
    """Give the whole pages inside ``[p, p + nbytes)`` back to the OS (they read as zeros)."""
    skype_release_pages(p, nbytes)


def set_huge_pages(bint enabled):
    """Turn the huge-page advice on or off for arrays mapped from now on (process-wide)."""
    global skype_huge_on
    skype_huge_on = 1 if enabled else 0


def huge_pages():
    """Whether the advice is on, and how many bytes it was given for so far."""
    return {"enabled": bool(skype_huge_on), "advised_bytes": int(skype_huge_advised)}
