# Large arrays in their own mappings, backed by transparent huge pages where the kernel allows.

cdef void* huge_alloc(size_t nbytes) noexcept nogil
cdef void* huge_resize(void* p, size_t old_bytes, size_t new_bytes) noexcept nogil
cdef void* small_pages_alloc(size_t nbytes) noexcept nogil
cdef void* small_pages_resize(void* p, size_t old_bytes, size_t new_bytes) noexcept nogil
cdef void huge_free(void* p, size_t nbytes) noexcept nogil
cdef void advise_huge(void* p, size_t nbytes) noexcept nogil
cdef void release_pages(void* p, size_t nbytes) noexcept nogil
