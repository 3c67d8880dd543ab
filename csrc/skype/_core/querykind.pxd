# The interface of a continuous query kind (range, knn, terms), siblings held by QueryCore: the
# four hooks of a step and the change columns they emit into (QueryCore's).
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t
from skype._core.types cimport MsgTermC
from skype._core.window cimport MsgC
from skype._core.querywindow cimport QueryWindow


cdef struct ChangeColsC:           # the change log's columns (owned by QueryCore)
    vector[int64_t]* at
    vector[int64_t]* sub
    vector[int64_t]* entry         # a message id, or a term id (terms)
    vector[uint8_t]* entered


cdef inline void emit(ChangeColsC* out, int64_t at, int64_t sub, int64_t entry, bint entered) noexcept nogil:
    out.at.push_back(at)
    out.sub.push_back(sub)
    out.entry.push_back(entry)
    out.entered.push_back(entered)


cdef class QueryKind:
    cdef QueryWindow qw
    cdef ChangeColsC out
    cdef double ns, net_ns                 # its share of the steps, its netting's part (QueryCore's timers)

    cdef void c_attach(self, QueryWindow qw, ChangeColsC out) noexcept
    cdef void c_arrive(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil
    cdef void c_expire(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil
    cdef void c_expired(self, int64_t at) noexcept nogil
    cdef void c_net(self, int64_t at) noexcept nogil
