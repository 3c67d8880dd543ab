/* The block index's column filter (issue 23, deliverable 5): one block of a band's compact hot
 * columns against one (message, term), survivors compressed into a list of indices.
 *
 * Columns (groups of 8 postings, a field at a time: 16 bytes a posting): x, y as the postings' own f32 copies, and
 * four 16-bit fixed-point codes, each a conservative stand-in for the posting's bound field:
 *   w     = code / 32767.5, rounded UP      (w(s, t) <= 1: the range [0, 2) leaves room)
 *   rest  = code / 4096.0,  rounded UP      (wtsum of the later terms; 65535: 16 or more, and then
 *                                             the text part is taken as its cap, 1)
 *   alpha = code / 65535.0, rounded to nearest (the caller's margin covers |error| <= 1e-5)
 *   theta = (code - 1) / 65533.0, rounded DOWN; code 0 stands for -inf (theta <= 0) and 65535 for
 *           a removed posting (never kept)
 * so the float bound computed here is >= the posting's own bound minus the float arithmetic, which
 * the caller's margin covers: no posting the exact test keeps is ever dropped.
 *
 * The test, without a root or a division (as blocks.pxd's below()), with tt = min(1, w wm + rest mx)
 * and r = alpha + (1 - alpha) tt - theta + margin: keep iff r >= 0 and alpha^2 d^2 <= r^2 MaxDist^2.
 *
 * Two kernels compute the same mask operation by operation (no fused multiply-add: setup.py builds
 * with -ffp-contract=off and the AVX2 path uses separate multiplies and adds), so they keep the same
 * postings: a portable one (a keep bit per lane, a branch-free compress: out[n] = i; n += keep) and an AVX2 one, compiled
 * with a target attribute and chosen at run time with __builtin_cpu_supports; the rest of the
 * extension is built for the baseline CPU.  No branch per posting: one per group of 8, and (AVX2)
 * one per survivor.
 */
#ifndef SKYPE_SCANKERNEL_H
#define SKYPE_SCANKERNEL_H

#include <stdint.h>
#include <stddef.h>
#include <math.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define SKYPE_SCAN_X86 1
#include <immintrin.h>
#else
#define SKYPE_SCAN_X86 0
#endif

#define SKYPE_W_SCALE 32767.5
#define SKYPE_REST_SCALE 4096.0
#define SKYPE_ALPHA_SCALE 65535.0
#define SKYPE_THETA_SCALE 65533.0
#define SKYPE_THETA_REMOVED 65535u

typedef struct {
    float fx, fy;        /* the message's location */
    float wm, mx;        /* w(m, t) and the largest weight of the message's later terms */
    float margin;        /* slack of the f32 copies + float arithmetic + alpha's rounding */
    float max_dist2;     /* MaxDist^2 */
} skype_scan_query;

/* ---- encoders (conservative; used when a posting's columns are written) ---- */
static inline uint16_t skype_code_up(double v, double scale) {
    double c;
    if (!(v > 0.0)) return 0;
    c = ceil(v * scale);
    return c >= 65535.0 ? (uint16_t)65535 : (uint16_t)c;
}

static inline uint16_t skype_code_w(double w) {
    /* w <= 1 always; a saturated code would decode below w, so saturation means >= 2 - 1/32767.5 */
    return skype_code_up(w, SKYPE_W_SCALE);
}

static inline uint16_t skype_code_rest(double rest) { return skype_code_up(rest, SKYPE_REST_SCALE); }

static inline uint16_t skype_code_alpha(double alpha) {
    double c = floor(alpha * SKYPE_ALPHA_SCALE + 0.5);
    if (c < 0.0) return 0;
    return c > 65535.0 ? (uint16_t)65535 : (uint16_t)c;
}

static inline uint16_t skype_code_theta(double theta) {
    double c;
    if (theta == INFINITY) return SKYPE_THETA_REMOVED;
    if (!(theta > 0.0)) return 0;
    c = floor(theta * SKYPE_THETA_SCALE);
    if (c > 65533.0) c = 65533.0;
    /* decoded as (code - 1) / scale: make sure it is <= theta in double (floor may be off by one
       ulp of the product) */
    while (c > 0.0 && c / SKYPE_THETA_SCALE > theta) c -= 1.0;
    return (uint16_t)(c + 1.0);
}

/* ---- decoders (the kernels' float values; scalar copies for tests) ---- */
static inline float skype_decode_w(uint16_t c) { return (float)c * (float)(1.0 / SKYPE_W_SCALE); }
static inline float skype_decode_rest(uint16_t c) {
    return c == 65535 ? INFINITY : (float)c * (float)(1.0 / SKYPE_REST_SCALE);
}
static inline float skype_decode_alpha(uint16_t c) { return (float)c * (float)(1.0 / SKYPE_ALPHA_SCALE); }
static inline float skype_decode_theta(uint16_t c) {
    if (c == 0) return -INFINITY;
    if (c == SKYPE_THETA_REMOVED) return INFINITY;
    return (float)(c - 1) * (float)(1.0 / SKYPE_THETA_SCALE);
}

/* ---- the column layout: groups of 8 postings (one AVX2 vector a field), 128 bytes, so a
 * band's columns are one contiguous array of whole cache lines; the lanes past a band's last
 * posting hold the removed code and are never kept ---- */
typedef struct {
    float x[8];
    float y[8];
    uint16_t w[8];
    uint16_t rest[8];
    uint16_t alpha[8];
    uint16_t theta[8];
} skype_col_group;

/* lanes [lo, hi) of a group as a bit mask */
static inline unsigned skype_lanes(size_t g, size_t start, size_t end) {
    size_t base = g * 8;
    unsigned lo = start > base ? (unsigned)(start - base) : 0u;
    unsigned hi = end < base + 8 ? (unsigned)(end - base) : 8u;
    return (0xFFu >> (8u - hi)) & ~((1u << lo) - 1u);
}

/* ---- the portable kernel: a keep bit per lane, then a branch-free compress ---- */
static inline size_t skype_scan_portable(const skype_col_group* groups, size_t start, size_t end,
                                         const skype_scan_query* q, uint32_t* out) {
    size_t g, n = 0;
    unsigned l, bits;
    const float one = 1.0f;
    const float sw = (float)(1.0 / SKYPE_W_SCALE), sr = (float)(1.0 / SKYPE_REST_SCALE);
    const float sa = (float)(1.0 / SKYPE_ALPHA_SCALE), st = (float)(1.0 / SKYPE_THETA_SCALE);
    if (start >= end) return 0;
    for (g = start / 8; g * 8 < end; g++) {
        const skype_col_group* c = groups + g;
        bits = 0;
        for (l = 0; l < 8; l++) {
            float dx = c->x[l] - q->fx, dy = c->y[l] - q->fy;
            float d2 = dx * dx + dy * dy;
            float w = (float)c->w[l] * sw;
            float rest = (float)c->rest[l] * sr;
            float a = (float)c->alpha[l] * sa;
            float th = (float)((int32_t)c->theta[l] - 1) * st;
            float tt, r;
            unsigned keep;
            th = c->theta[l] == 0 ? -INFINITY : th;
            tt = w * q->wm + rest * q->mx;
            tt = tt < one ? tt : one;
            tt = c->rest[l] == 65535 ? one : tt;
            r = a + (one - a) * tt - th + q->margin;
            keep = (unsigned)((r >= 0.0f) & (a * a * d2 <= r * r * q->max_dist2)
                              & (c->theta[l] != SKYPE_THETA_REMOVED));
            bits |= keep << l;
        }
        bits &= skype_lanes(g, start, end);
        for (l = 0; l < 8; l++) {
            out[n] = (uint32_t)(g * 8 + l);
            n += (bits >> l) & 1u;
        }
    }
    return n;
}

#if SKYPE_SCAN_X86
/* ---- the AVX2 kernel: a group a step, the same operations in the same order ---- */
__attribute__((target("avx2"))) static size_t skype_scan_avx2(
        const skype_col_group* groups, size_t start, size_t end, const skype_scan_query* q,
        uint32_t* out) {
    size_t g, n = 0;
    const __m256 fx = _mm256_set1_ps(q->fx), fy = _mm256_set1_ps(q->fy);
    const __m256 wm = _mm256_set1_ps(q->wm), mx = _mm256_set1_ps(q->mx);
    const __m256 margin = _mm256_set1_ps(q->margin), m2 = _mm256_set1_ps(q->max_dist2);
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    const __m256 sw = _mm256_set1_ps((float)(1.0 / SKYPE_W_SCALE));
    const __m256 sr = _mm256_set1_ps((float)(1.0 / SKYPE_REST_SCALE));
    const __m256 sa = _mm256_set1_ps((float)(1.0 / SKYPE_ALPHA_SCALE));
    const __m256 st = _mm256_set1_ps((float)(1.0 / SKYPE_THETA_SCALE));
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256i c0 = _mm256_setzero_si256(), cmax = _mm256_set1_epi32(65535);
    const __m256i c1 = _mm256_set1_epi32(1);
    if (start >= end) return 0;
    for (g = start / 8; g * 8 < end; g++) {
        const skype_col_group* c = groups + g;
        __m256 dx = _mm256_sub_ps(_mm256_loadu_ps(c->x), fx);
        __m256 dy = _mm256_sub_ps(_mm256_loadu_ps(c->y), fy);
        __m256 d2 = _mm256_add_ps(_mm256_mul_ps(dx, dx), _mm256_mul_ps(dy, dy));
        __m256i wi = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)c->w));
        __m256i ri = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)c->rest));
        __m256i ai = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)c->alpha));
        __m256i ti = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)c->theta));
        __m256 w = _mm256_mul_ps(_mm256_cvtepi32_ps(wi), sw);
        __m256 rest = _mm256_mul_ps(_mm256_cvtepi32_ps(ri), sr);
        __m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(ai), sa);
        __m256 th = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(ti, c1)), st);
        __m256 tt, r, keep;
        unsigned bits;
        th = _mm256_blendv_ps(th, ninf, _mm256_castsi256_ps(_mm256_cmpeq_epi32(ti, c0)));
        tt = _mm256_add_ps(_mm256_mul_ps(w, wm), _mm256_mul_ps(rest, mx));
        tt = _mm256_min_ps(tt, one);
        tt = _mm256_blendv_ps(tt, one, _mm256_castsi256_ps(_mm256_cmpeq_epi32(ri, cmax)));
        r = _mm256_add_ps(_mm256_sub_ps(_mm256_add_ps(a, _mm256_mul_ps(_mm256_sub_ps(one, a), tt)), th),
                          margin);
        keep = _mm256_and_ps(_mm256_cmp_ps(r, zero, _CMP_GE_OQ),
                             _mm256_cmp_ps(_mm256_mul_ps(_mm256_mul_ps(a, a), d2),
                                           _mm256_mul_ps(_mm256_mul_ps(r, r), m2), _CMP_LE_OQ));
        keep = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(ti, cmax)), keep);
        bits = (unsigned)_mm256_movemask_ps(keep) & skype_lanes(g, start, end);
        while (bits) {
            out[n++] = (uint32_t)(g * 8 + (size_t)__builtin_ctz(bits));
            bits &= bits - 1;
        }
    }
    return n;
}
#endif

/* ---- run-time choice: 0 portable, 1 AVX2; skype_scan_force(-1) restores the CPU's choice ---- */
static int skype_scan_forced = -1;

static inline int skype_scan_has_avx2(void) {
#if SKYPE_SCAN_X86
    return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

static inline void skype_scan_force(int kernel) { skype_scan_forced = kernel; }

static inline int skype_scan_kernel(void) {
    if (skype_scan_forced >= 0) return skype_scan_forced && skype_scan_has_avx2();
    return skype_scan_has_avx2();
}

static inline size_t skype_scan_block(int kernel, const skype_col_group* groups, size_t start, size_t end,
                                      const skype_scan_query* q, uint32_t* out) {
#if SKYPE_SCAN_X86
    if (kernel == 1) return skype_scan_avx2(groups, start, end, q, out);
#endif
    (void)kernel;
    return skype_scan_portable(groups, start, end, q, out);
}

#endif
