# cython: language_level=3
"""Python access to the scoring kernels: batch scoring for checks, tests and baselines.

Every function here calls the inline kernels of scoring.pxd, so what it returns is exactly what
the engine computes internally.
"""
import numpy as np
cimport numpy as cnp
from libc.math cimport INFINITY
from skype._core.types cimport term_t, SubTermC, MsgTermC
from libcpp.vector cimport vector
from libc.stdint cimport int64_t
from skype._core.scoring cimport score_pair

cnp.import_array()


cdef vector[SubTermC] sub_terms(const term_t[::1] terms, const double[::1] w, Py_ssize_t a, Py_ssize_t b):
    """Term records of subscriptions (the suffix statistics are not needed for scoring)."""
    cdef vector[SubTermC] out
    cdef SubTermC rec
    cdef Py_ssize_t i
    for i in range(a, b):
        rec.term = terms[i]
        rec.w = w[i]
        rec.wtsum = 0
        out.push_back(rec)
    return out


cdef vector[MsgTermC] msg_terms(const term_t[::1] terms, const double[::1] w):
    cdef vector[MsgTermC] out
    cdef MsgTermC rec
    cdef Py_ssize_t i
    for i in range(terms.shape[0]):
        rec.term = terms[i]
        rec.pad = 0
        rec.w = w[i]
        out.push_back(rec)
    return out


def score_subscription_against(double alpha, double sx, double sy,
                               const term_t[::1] s_terms, const double[::1] s_w,
                               const double[::1] mx, const double[::1] my,
                               const int64_t[::1] m_indptr, const term_t[::1] m_terms,
                               const double[::1] m_w, double max_dist):
    """Scores of one subscription against a batch of messages (CSR terms).

    Messages sharing no term get ``-inf``.
    """
    cdef Py_ssize_t n = mx.shape[0], i
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] res = out
    cdef vector[SubTermC] st = sub_terms(s_terms, s_w, 0, s_terms.shape[0])
    cdef vector[MsgTermC] mt = msg_terms(m_terms, m_w)
    with nogil:
        for i in range(n):
            if m_indptr[i + 1] == m_indptr[i] or st.size() == 0:
                res[i] = -INFINITY
                continue
            res[i] = score_pair(alpha, sx, sy, st.data(), <int>st.size(),
                                mx[i], my[i], &mt[m_indptr[i]], <int>(m_indptr[i + 1] - m_indptr[i]), max_dist)
    return out


def score_pairs(const double[::1] alpha, const double[::1] sx, const double[::1] sy,
                const int64_t[::1] s_indptr, const term_t[::1] s_terms, const double[::1] s_w,
                const double[::1] mx, const double[::1] my,
                const int64_t[::1] m_indptr, const term_t[::1] m_terms, const double[::1] m_w,
                const int64_t[::1] pair_s, const int64_t[::1] pair_m, double max_dist):
    """Scores of the pairs (pair_s[i], pair_m[i]); ``-inf`` where they share no term."""
    cdef Py_ssize_t n = pair_s.shape[0], i, a, b
    out = np.empty(n, dtype=np.float64)
    cdef double[::1] res = out
    cdef vector[SubTermC] st = sub_terms(s_terms, s_w, 0, s_terms.shape[0])
    cdef vector[MsgTermC] mt = msg_terms(m_terms, m_w)
    with nogil:
        for i in range(n):
            a = pair_s[i]
            b = pair_m[i]
            if s_indptr[a + 1] == s_indptr[a] or m_indptr[b + 1] == m_indptr[b]:
                res[i] = -INFINITY
                continue
            res[i] = score_pair(alpha[a], sx[a], sy[a], &st[s_indptr[a]], <int>(s_indptr[a + 1] - s_indptr[a]),
                                mx[b], my[b], &mt[m_indptr[b]], <int>(m_indptr[b + 1] - m_indptr[b]), max_dist)
    return out
