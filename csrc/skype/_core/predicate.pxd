# Boolean term predicates of the query kinds, evaluated on a message's sorted term list.
#
# A predicate is a postfix program of int64 codes: a code >= 0 pushes "the message holds term
# <code>", OP_AND / OP_OR pop two values and push their conjunction / disjunction.  An empty
# program is true (a query without terms).  Term lists are ascending, so a membership test is a
# binary search.
from libc.math cimport sqrt
from libc.stdint cimport int64_t, uint8_t
from libcpp.vector cimport vector
from skype._core.types cimport term_t, MsgTermC

cdef enum:
    OP_AND = -1
    OP_OR = -2


cdef inline int term_index(const MsgTermC* terms, int n, term_t t) noexcept nogil:
    """The position of term ``t`` in a message's terms (ascending), or -1 when it lacks it."""
    cdef int lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if terms[mid].term < t:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < n and terms[lo].term == t else -1


cdef inline bint holds_term(const MsgTermC* terms, int n, term_t t) noexcept nogil:
    return term_index(terms, n, t) >= 0


cdef inline bint eval_program(const int64_t* prog, int plen, const MsgTermC* terms, int n,
                              vector[uint8_t]* stack) noexcept nogil:
    cdef int i, top = 0
    cdef int64_t op
    if plen == 0:
        return True
    if plen == 1:
        return holds_term(terms, n, <term_t>prog[0])
    if <int>stack.size() < plen:
        stack.resize(plen)
    for i in range(plen):
        op = prog[i]
        if op == OP_AND:
            top -= 1
            stack[0][top - 1] = stack[0][top - 1] and stack[0][top]
        elif op == OP_OR:
            top -= 1
            stack[0][top - 1] = stack[0][top - 1] or stack[0][top]
        else:
            stack[0][top] = holds_term(terms, n, <term_t>op)
            top += 1
    return stack[0][0]


cdef inline double point_distance(double qx, double qy, double mx, double my) noexcept nogil:
    """Euclidean distance, with the reference engine's operations (dx = mx - qx)."""
    cdef double dx = mx - qx
    cdef double dy = my - qy
    return sqrt(dx * dx + dy * dy)
