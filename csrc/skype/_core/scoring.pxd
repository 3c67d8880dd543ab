# Scoring and geometry kernels shared by every core module (inline, nogil).
#
# score_pair is THE score of the system, operation by operation identical to
# skype.reference.score: TSim summed over common terms in ascending term id, then
# SSim = 1 - sqrt(dx*dx + dy*dy) / max_dist and ST = alpha*SSim + (1-alpha)*TSim.  With
# -ffp-contract=off (setup.py) the two engines agree bit for bit, so ties break identically.
from libc.math cimport sqrt, nextafterf, INFINITY
from skype._core.types cimport term_t, RectC, SubTermC, MsgTermC


cdef inline double text_sim(const SubTermC* s, int s_n, const MsgTermC* m, int m_n,
                            bint* shared) noexcept nogil:
    """Dot product of two sorted sparse unit vectors; sets shared[0] if they meet."""
    cdef int i = 0, j = 0
    cdef double acc = 0.0
    shared[0] = False
    while i < s_n and j < m_n:
        if s[i].term == m[j].term:
            acc += s[i].w * m[j].w
            shared[0] = True
            i += 1
            j += 1
        elif s[i].term < m[j].term:
            i += 1
        else:
            j += 1
    return acc


cdef inline double spatial_sim(double sx, double sy, double mx, double my,
                               double max_dist) noexcept nogil:
    cdef double dx = mx - sx
    cdef double dy = my - sy
    return 1.0 - sqrt(dx * dx + dy * dy) / max_dist


cdef inline double combine(double alpha, double ssim, double tsim) noexcept nogil:
    return alpha * ssim + (1.0 - alpha) * tsim


cdef inline double score_pair(double alpha, double sx, double sy, const SubTermC* s, int s_n,
                              double mx, double my, const MsgTermC* m, int m_n,
                              double max_dist) noexcept nogil:
    """ST(s, m), or -INFINITY when s and m share no term."""
    cdef bint shared
    cdef double tsim = text_sim(s, s_n, m, m_n, &shared)
    if not shared:
        return -INFINITY
    return combine(alpha, spatial_sim(sx, sy, mx, my, max_dist), tsim)


cdef inline double mindist2(const RectC* r, double x, double y) noexcept nogil:
    """Squared MINDIST from a point to a closed rectangle (0 inside)."""
    cdef double dx = 0.0, dy = 0.0
    if x < r.minx:
        dx = r.minx - x
    elif x > r.maxx:
        dx = x - r.maxx
    if y < r.miny:
        dy = r.miny - y
    elif y > r.maxy:
        dy = y - r.maxy
    return dx * dx + dy * dy


cdef inline double mindist(const RectC* r, double x, double y) noexcept nogil:
    """MINDIST from a point to a closed rectangle (0 inside)."""
    return sqrt(mindist2(r, x, y))


cdef inline double inner_dist(const RectC* r, double x, double y) noexcept nogil:
    """d_in: distance from a point inside r to the nearest border of r (spec Def. 6)."""
    cdef double d = x - r.minx
    if r.maxx - x < d:
        d = r.maxx - x
    if y - r.miny < d:
        d = y - r.miny
    if r.maxy - y < d:
        d = r.maxy - y
    return d


cdef inline bint rect_contains(const RectC* r, double x, double y) noexcept nogil:
    return r.minx <= x <= r.maxx and r.miny <= y <= r.maxy


cdef inline int quadrant(const RectC* r, double x, double y) noexcept nogil:
    """Quadrant of a point in r (bit 0: east, bit 1: north); points on a midline go east/north."""
    cdef double midx = (r.minx + r.maxx) * 0.5
    cdef double midy = (r.miny + r.maxy) * 0.5
    return (1 if x >= midx else 0) + (2 if y >= midy else 0)


cdef inline void child_rect(const RectC* r, int q, RectC* out) noexcept nogil:
    """Closed rectangle of quadrant q of r (children share their borders)."""
    cdef double midx = (r.minx + r.maxx) * 0.5
    cdef double midy = (r.miny + r.maxy) * 0.5
    out.minx = midx if (q & 1) else r.minx
    out.maxx = r.maxx if (q & 1) else midx
    out.miny = midy if (q & 2) else r.miny
    out.maxy = r.maxy if (q & 2) else midy


cdef inline float round_up(double v) noexcept nogil:
    """The smallest float >= v (stored upper bounds)."""
    cdef float f = <float>v
    if <double>f < v:
        f = nextafterf(f, INFINITY)
    return f


cdef inline float round_down(double v) noexcept nogil:
    """The largest float <= v (stored lower bounds)."""
    cdef float f = <float>v
    if <double>f > v:
        f = nextafterf(f, -INFINITY)
    return f


cdef inline bint outside_time_window(double tm, double t, double T) noexcept nogil:
    """Exactly tm <= t - T, i.e. tm is not in the window (t - T, t] (no rounding of t - T).

    d = fl(t - tm) and its rounding error e (TwoSum; exact without fused operations, which
    setup.py disables) give t - tm = d + e exactly.  Rounding is monotone and T is a double, so
    d > T implies t - tm >= T, d < T implies t - tm < T, and d == T leaves the sign of e."""
    cdef double d = t - tm
    cdef double bv = d - t
    cdef double e = (t - (d - bv)) + (-tm - bv)
    if d != T:
        return d > T
    return e >= 0.0
