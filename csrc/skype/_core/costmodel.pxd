# The cost model that chooses cSkyband's threshold (spec §4.3), as inline functions of one struct.
#
# A buffer keeps the partial k-skyband of the messages scoring >= theta.  The cost per update of a
# threshold theta_n (the n-th best score of the window) is the skyband's maintenance plus the
# re-evaluation cost spread over the expected number of updates until expiry leaves fewer than k
# entries (Eq. 13).  That number is the absorption time of a lazy random walk on the buffer size,
# from n down to k - 1, reflected at a barrier (Eq. 12; the asymmetric form of §4.4 when the
# window is a time window and arrivals and expiries are not equally likely).
#
# Invariants: p_arrival + p_expiry = 1 (count windows: 1/2 each, time windows estimated by the
# engine); window_n >= 1 is the window size N the steady state is planned for; every function is
# pure (reads the struct, changes nothing) and returns INFINITY where the walk never ends.
from libc.math cimport pow, log, isfinite, INFINITY
from libc.stdint cimport int32_t


cdef enum BarrierKind:
    BARRIER_STATIONARY = 0       # reflect at n0 = N * P_theta (spec §4.3 recommendation)
    BARRIER_WINDOW = 1           # reflect at N
    BARRIER_FACTOR = 2           # reflect at factor * n0


cdef struct CostModelC:
    double c_ins                 # cost of touching one buffer entry on an insertion (the unit)
    double c_del                 # cost of deleting an expired entry
    int barrier                  # a BarrierKind
    double barrier_factor
    double window_n              # N: the window size planned for
    double p_arrival             # probability that an update is an arrival
    double p_expiry


cdef inline double expected_steps(const CostModelC* m, double n, int32_t k, double P) noexcept nogil:
    """E[T']: updates until |B'| < k, a lazy random walk from n absorbed at k - 1 and
    reflected at the barrier b (Eq. 12; asymmetric form of §4.4 for time windows)."""
    cdef double d = n - k + 1, b, A, p, q, rho, e
    if m.barrier == BARRIER_WINDOW:
        b = m.window_n if m.window_n > n else n
    elif m.barrier == BARRIER_FACTOR:
        b = m.barrier_factor * n
    else:
        b = n
    A = b - k + 1
    p = m.p_arrival * P
    q = m.p_expiry * P
    if q <= 0:
        return INFINITY
    if p == q or (p > q and p - q < 1e-12 * q) or (q > p and q - p < 1e-12 * q):
        return d * (2.0 * A + 1.0 - d) / (2.0 * q)
    rho = p / q
    e = (d - pow(rho, A - d + 1.0) * (1.0 - pow(rho, d)) / (1.0 - rho)) / (q - p)
    if not isfinite(e) or e <= 0:
        return INFINITY
    return e


cdef inline double threshold_cost(const CostModelC* m, double window_count, double n, int32_t k,
                                  double cq_cost) noexcept nogil:
    """C(theta_n) of Eq. 13 for theta = the n-th best score of the current window (which holds
    ``window_count`` messages): skyband maintenance plus re-evaluation cost per update.
    P_theta = n / |W| is estimated on the current window; the walk and the buffer size are those
    of the steady state, with n0 = N * P_theta messages above theta once the window holds N
    (while a count window is still filling, n0 > n).  cq_cost < 0 means "no re-evaluation ever"
    (theta = 0)."""
    cdef double W = window_count if window_count > 0 else 1.0
    cdef double P = n / W if n < W else 1.0
    cdef double N = m.window_n if m.window_n > W else W
    cdef double n0 = N * P
    # E|B| = k (1 + H_n0 - H_k), H_x - H_k ~ ln(x / k) + 1/(2x) - 1/(2k)
    cdef double eb = k * (1.0 + (log(n0 / k) + 0.5 / n0 - 0.5 / k if n0 > k else 0.0))
    cdef double maintenance = P * (m.p_arrival * m.c_ins * eb + m.p_expiry * m.c_del)
    if cq_cost < 0:
        return maintenance
    return maintenance + cq_cost / expected_steps(m, n0, k, P)
