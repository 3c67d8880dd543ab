# The engine's output (flush.pyx): a message's top-k events netted per (subscription, message).
from libcpp.vector cimport vector
from libc.stdint cimport int64_t, uint8_t, uint64_t
from skype._core.types cimport ext_id_t
from skype._core.bufstore cimport EventC


cdef class TopkChanges:
    cdef vector[int64_t] out_at, out_sub, out_msg
    cdef vector[uint8_t] out_entered

    cdef uint64_t net(self, vector[EventC]* ev, int64_t at, const ext_id_t* sub_ext) noexcept nogil
