# cython: language_level=3
"""The interface of a continuous query kind: what :class:`~skype._core.querycore.QueryCore` calls.

A step (one arriving message, or a clock advance) runs, for each kind in turn: ``c_expire`` of
each expiring message while it is still in the window, then (once the window has popped it)
``c_expired``; ``c_arrive`` of the arriving message once it is in the window; and at the step's
end ``c_net``, which emits the step's netted changes.  A kind emits into the change columns it
was attached to (``c_attach``: QueryCore's) and reads the shared query window; it keeps
everything else to itself.  Every hook does nothing here: a kind overrides the ones it needs.
The Python side of a kind (subscribe, unsubscribe, result, prepare, stats) is its own.
"""
from libc.stdint cimport int64_t
from skype._core.types cimport MsgTermC
from skype._core.window cimport MsgC
from skype._core.querywindow cimport QueryWindow


cdef class QueryKind:
    cdef void c_attach(self, QueryWindow qw, ChangeColsC out) noexcept:
        self.qw = qw
        self.out = out

    cdef void c_arrive(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil:
        pass

    cdef void c_expire(self, int64_t at, const MsgC* m, const MsgTermC* mt) noexcept nogil:
        pass

    cdef void c_expired(self, int64_t at) noexcept nogil:
        pass

    cdef void c_net(self, int64_t at) noexcept nogil:
        pass

    def prepare(self):
        """Settle the indexes after a bulk registration."""

    def stats(self):
        return {}
