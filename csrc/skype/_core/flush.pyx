# cython: language_level=3
"""The engine's output: the top-k changes of each published message (spec §2, step 3).

One message's processing (its expiries, its admissions, the re-evaluations they cause) appends
+1/-1 events to the buffers' ``events`` (bufstore.pyx), possibly several for one (subscription,
message) pair: a message can enter a top-k and leave it again within the same operation.
``net`` sorts them by (subscription, message) and appends one change per pair whose deltas do
not sum to zero (entered: the sum is positive), so the output holds exactly the difference
between the top-k before and after the message; the events are then cleared.  The changes
accumulate, in publication order, until ``take`` hands them to Python as numpy arrays.
"""
import numpy as np
from libcpp.algorithm cimport sort as std_sort
from libc.stdint cimport int32_t


cdef bint event_less(const EventC& a, const EventC& b) noexcept nogil:
    if a.sid != b.sid:
        return a.sid < b.sid
    return a.msg < b.msg


cdef class TopkChanges:
    cdef uint64_t net(self, vector[EventC]* ev, int64_t at, const ext_id_t* sub_ext) noexcept nogil:
        """Net the events per (subscription, message), append the changes with position ``at``
        (subscriptions as sub_ext[sid]) and clear the events; returns how many changes."""
        cdef size_t i = 0, j
        cdef int32_t total
        cdef uint64_t changes = 0
        std_sort(ev.begin(), ev.end(), event_less)
        while i < ev.size():
            j = i
            total = 0
            while j < ev.size() and ev[0][j].sid == ev[0][i].sid and ev[0][j].msg == ev[0][i].msg:
                total += ev[0][j].delta
                j += 1
            if total != 0:
                self.out_at.push_back(at)
                self.out_sub.push_back(sub_ext[ev[0][i].sid])
                self.out_msg.push_back(ev[0][i].msg)
                self.out_entered.push_back(total > 0)
                changes += 1
            i = j
        ev.clear()
        return changes

    def take(self):
        """The accumulated changes as (at, sub, msg, entered) arrays; clears them."""
        n = self.out_at.size()
        at = np.empty(n, dtype=np.int64)
        sub = np.empty(n, dtype=np.int64)
        msg = np.empty(n, dtype=np.int64)
        entered = np.empty(n, dtype=bool)
        cdef size_t i
        cdef int64_t[::1] a = at, s = sub, m = msg
        cdef uint8_t[::1] e = entered.view(np.uint8)
        for i in range(n):
            a[i] = self.out_at[i]
            s[i] = self.out_sub[i]
            m[i] = self.out_msg[i]
            e[i] = self.out_entered[i]
        self.out_at.clear()
        self.out_sub.clear()
        self.out_msg.clear()
        self.out_entered.clear()
        return at, sub, msg, entered
