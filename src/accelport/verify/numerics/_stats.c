/* One-pass tensor statistics for `accelport dump` on the CPU (compiled at first use by
 * accelport/verify/numerics/native.py; numpy does the same work when no C compiler is found).
 *
 * ap_stats_<dtype>(x, n, out) adds the statistics of n contiguous elements to out[9]
 * (ap_stats_<dtype>_nd: of a strided tensor whose last dimension is contiguous):
 *   out[0] min, out[1] max (over finite elements; start at +inf / -inf),
 *   out[2] sum, out[3] sum of squares, out[4] sum of |x| (finite elements, float64),
 *   out[5] NaN count, out[6] Inf count, out[7] zero count, out[8] finite count.
 *
 * Written with GCC/Clang vector extensions, so it builds for any target the compiler
 * knows (AVX-512, AVX2, NEON...). Elements are read once, in blocks of BLOCK: a block with
 * only finite values (the common case) costs a min, max, add, multiply-add, abs-add and
 * an integer min and max of |x| per vector (no compare on any dependency chain), with
 * float32 lane sums added into float64 per block. A block holding zeros is read again
 * (from L1) to count them; a block holding NaN/Inf is read again with masks; a block
 * whose float32 lane sums overflowed (values near the float32 maximum) is summed again
 * in float64. The sums are added in the same order whatever the path, so the numbers do
 * not depend on which path a block took.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_DIMS 64 /* torch's limit on tensor dimensions */
#define BLOCK 2048 /* elements per block: 8 KiB of float32, 128 vectors per lane sum */
/* Bytes ahead of the sweep to prefetch. A tensor an op just wrote is mostly in the
 * writing cores' L2 or in L3, not in L1: the sweep's few operations per cache line leave
 * too little time for the hardware prefetcher to hide that latency (measured in a dump of
 * a transformer step on a 2-core Xeon: 19 ms -> 14.5 ms for ~350 MB; distances of 4-16
 * KiB did alike). Prefetches past the end of a tensor are harmless (they never fault). */
#define PREFETCH 8192

typedef float vf32 __attribute__((vector_size(64)));
typedef int32_t vi32 __attribute__((vector_size(64)));
typedef uint32_t vu32 __attribute__((vector_size(64)));
typedef double vf64 __attribute__((vector_size(64)));
typedef int64_t vi64 __attribute__((vector_size(64)));
typedef uint64_t vu64 __attribute__((vector_size(64)));
typedef uint16_t vu16 __attribute__((vector_size(32)));

static inline vf32 load_f32(const float *x) { vf32 v; memcpy(&v, x, sizeof v); return v; }
static inline vf64 load_f64(const double *x) { vf64 v; memcpy(&v, x, sizeof v); return v; }
static inline vf32 load_bf16(const uint16_t *x) {
    vu16 h;
    memcpy(&h, x, sizeof h);
    return (vf32)(__builtin_convertvector(h, vu32) << 16);
}
static inline double one_f32(const float *x) { return *x; }
static inline double one_f64(const double *x) { return *x; }
static inline double one_bf16(const uint16_t *x) {
    uint32_t bits = (uint32_t)*x << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Lane-wise min(a, b) = a < b ? a : b and max(a, b) = a > b ? a : b (b where they are
 * equal or unordered: x86's minps/maxps exactly), and unsigned integer min/max. With
 * AVX-512 each is one instruction; the portable form, a compare and a select, puts the
 * compare's latency on the running minimum's dependency chain. */
#define SELECT(VI, m, a, b) (((VI)(a) & (m)) | ((VI)(b) & ~(m)))
#if defined(__AVX512F__)
#include <immintrin.h>
static inline vf32 min_f32(vf32 a, vf32 b) { return (vf32)_mm512_min_ps((__m512)a, (__m512)b); }
static inline vf32 max_f32(vf32 a, vf32 b) { return (vf32)_mm512_max_ps((__m512)a, (__m512)b); }
static inline vf64 min_f64(vf64 a, vf64 b) { return (vf64)_mm512_min_pd((__m512d)a, (__m512d)b); }
static inline vf64 max_f64(vf64 a, vf64 b) { return (vf64)_mm512_max_pd((__m512d)a, (__m512d)b); }
static inline vu32 umin_u32(vu32 a, vu32 b) { return (vu32)_mm512_min_epu32((__m512i)a, (__m512i)b); }
static inline vu32 umax_u32(vu32 a, vu32 b) { return (vu32)_mm512_max_epu32((__m512i)a, (__m512i)b); }
static inline vu64 umin_u64(vu64 a, vu64 b) { return (vu64)_mm512_min_epu64((__m512i)a, (__m512i)b); }
static inline vu64 umax_u64(vu64 a, vu64 b) { return (vu64)_mm512_max_epu64((__m512i)a, (__m512i)b); }
#else
static inline vf32 min_f32(vf32 a, vf32 b) { return (vf32)SELECT(vi32, a < b, a, b); }
static inline vf32 max_f32(vf32 a, vf32 b) { return (vf32)SELECT(vi32, a > b, a, b); }
static inline vf64 min_f64(vf64 a, vf64 b) { return (vf64)SELECT(vi64, a < b, a, b); }
static inline vf64 max_f64(vf64 a, vf64 b) { return (vf64)SELECT(vi64, a > b, a, b); }
static inline vu32 umin_u32(vu32 a, vu32 b) { return (vu32)SELECT(vi32, a < b, a, b); }
static inline vu32 umax_u32(vu32 a, vu32 b) { return (vu32)SELECT(vi32, a > b, a, b); }
static inline vu64 umin_u64(vu64 a, vu64 b) { return (vu64)SELECT(vi64, a < b, a, b); }
static inline vu64 umax_u64(vu64 a, vu64 b) { return (vu64)SELECT(vi64, a > b, a, b); }
#endif

/* NAME: exported symbol; T: element type; VF/VI/VU: vector of the compute type and the
 * same-width signed and unsigned integers; W: lanes; MIN/MAX/UMIN/UMAX: the lane-wise
 * min and max above; ABS: the sign-clearing mask; BIG: the largest finite value; RESUM:
 * 1 where lane sums are narrower than float64 and may overflow. */
#define DEFINE_STATS(NAME, T, VF, VI, VU, W, LOADV, LOAD1, MIN, MAX, UMIN, UMAX, ABS, BIG, RESUM) \
    static void NAME##_scalar(const T *x, int64_t n, double *o, int sums_only) {               \
        for (int64_t i = 0; i < n; i++) {                                                      \
            double v = LOAD1(x + i);                                                           \
            if (v != v) { if (!sums_only) o[5] += 1; continue; }                               \
            if (v == INFINITY || v == -INFINITY) { if (!sums_only) o[6] += 1; continue; }      \
            o[2] += v; o[3] += v * v; o[4] += fabs(v);                                         \
            if (sums_only) continue;                                                           \
            if (v < o[0]) o[0] = v;                                                            \
            if (v > o[1]) o[1] = v;                                                            \
            o[7] += v == 0;                                                                    \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    /* Lane sums that overflowed (float32 near its maximum): the block's sums in float64. */   \
    static inline void NAME##_resum(const T *x, int64_t n, double *ss, double *qq, double *aa) { \
        if (!(RESUM && (isinf(*ss) || isinf(*qq) || isinf(*aa)))) return;                      \
        double w[9] = {0};                                                                     \
        NAME##_scalar(x, n, w, 1);                                                             \
        *ss = w[2]; *qq = w[3]; *aa = w[4];                                                    \
    }                                                                                          \
                                                                                               \
    /* A block of finite values: 1 and its statistics added, or 0 and nothing changed.         \
     * Per vector: min, max, the three sums, and the smallest and largest |x| as integer       \
     * bits: above BIG's bits is NaN or Inf (the block is read again, masked); a smallest      \
     * |x| of 0 means zeros, counted in a second pass over the block (still in L1). */         \
    static int NAME##_finite(const T *x, int64_t n, double *o) {                               \
        VF big = (VF){} + BIG;                                                                 \
        const VU limit = (VU)big;                                                              \
        const VI absmask = (VI){} + ABS;                                                       \
        VF lo = LOADV(x), hi = lo, s = {}, q = {}, a = {};                                     \
        VU top = {}, bottom = ~(VU){};                                                         \
        for (int64_t i = 0; i < n; i += W) {                                                   \
            __builtin_prefetch((const char *)(x + i) + PREFETCH, 0, 3);                        \
            VF v = LOADV(x + i);                                                               \
            VF m = (VF)((VI)v & absmask);                                                      \
            top = UMAX((VU)m, top);                                                            \
            bottom = UMIN((VU)m, bottom);                                                      \
            lo = MIN(v, lo);                                                                   \
            hi = MAX(v, hi);                                                                   \
            s += v; q += v * v; a += m;                                                        \
        }                                                                                      \
        int has_zero = 0;                                                                      \
        for (int j = 0; j < W; j++) {                                                          \
            if (top[j] > limit[j]) return 0; /* NaN or Inf */                                  \
            has_zero |= bottom[j] == 0;                                                        \
        }                                                                                      \
        double ss = 0, qq = 0, aa = 0, l = o[0], h = o[1], z = 0;                              \
        for (int j = 0; j < W; j++) {                                                          \
            if (lo[j] < l) l = lo[j];                                                          \
            if (hi[j] > h) h = hi[j];                                                          \
            ss += s[j]; qq += q[j]; aa += a[j];                                                \
        }                                                                                      \
        if (has_zero) {                                                                        \
            VI zeros = {};                                                                     \
            for (int64_t i = 0; i < n; i += W) zeros += LOADV(x + i) == (VF){};                \
            for (int j = 0; j < W; j++) z -= zeros[j];                                         \
        }                                                                                      \
        NAME##_resum(x, n, &ss, &qq, &aa);                                                     \
        o[0] = l; o[1] = h; o[2] += ss; o[3] += qq; o[4] += aa; o[7] += z; o[8] += n;          \
        return 1;                                                                              \
    }                                                                                          \
                                                                                               \
    /* A block holding NaN or Inf: non-finite lanes masked out of every statistic. */          \
    static void NAME##_masked(const T *x, int64_t n, double *o) {                              \
        const VF big = (VF){} + BIG, inf = (VF){} + INFINITY;                                  \
        const VI absmask = (VI){} + ABS;                                                       \
        VF lo = inf, hi = -inf, s = {}, q = {}, a = {};                                        \
        VI nans = {}, infs = {}, zeros = {};                                                   \
        for (int64_t i = 0; i < n; i += W) {                                                   \
            VF v = LOADV(x + i);                                                               \
            VF m = (VF)((VI)v & absmask);                                                      \
            VI fin = m <= big;                                                                 \
            VF f = (VF)((VI)v & fin);                                                          \
            VF fl = (VF)SELECT(VI, fin, v, inf), fh = (VF)SELECT(VI, fin, v, -inf);            \
            lo = (VF)SELECT(VI, fl < lo, fl, lo);                                              \
            hi = (VF)SELECT(VI, fh > hi, fh, hi);                                              \
            s += f; q += f * f; a += (VF)((VI)m & fin);                                        \
            nans += v != v; infs += m == inf; zeros += v == (VF){};                            \
        }                                                                                      \
        double ss = 0, qq = 0, aa = 0, bad = 0;                                                \
        for (int j = 0; j < W; j++) {                                                          \
            if (lo[j] < o[0]) o[0] = lo[j];                                                    \
            if (hi[j] > o[1]) o[1] = hi[j];                                                    \
            ss += s[j]; qq += q[j]; aa += a[j];                                                \
            o[5] -= nans[j]; o[6] -= infs[j]; o[7] -= zeros[j];                                \
            bad -= nans[j] + infs[j];                                                          \
        }                                                                                      \
        NAME##_resum(x, n, &ss, &qq, &aa);                                                     \
        o[2] += ss; o[3] += qq; o[4] += aa; o[8] += n - bad;                                   \
    }                                                                                          \
                                                                                               \
    void NAME(const T *x, int64_t n, double *o) {                                              \
        int64_t full = n - n % W;                                                              \
        for (int64_t b = 0; b < full; b += BLOCK) {                                            \
            int64_t k = full - b < BLOCK ? full - b : BLOCK;                                   \
            if (!NAME##_finite(x + b, k, o)) NAME##_masked(x + b, k, o);                       \
        }                                                                                      \
        double before = o[5] + o[6];                                                           \
        NAME##_scalar(x + full, n - full, o, 0);                                               \
        o[8] += (double)(n - full) - (o[5] + o[6] - before);                                   \
    }                                                                                          \
                                                                                               \
    /* A strided tensor whose last dimension is contiguous. Short rows (the heads of a q/k/v   \
     * split) are gathered into a block-sized buffer that stays in L1 and swept a block at a   \
     * time, so the per-block work is not paid per row; rows of a block or more are swept in   \
     * place. Either way the elements are read in row order. */                                \
    void NAME##_nd(const T *x, int ndim, const int64_t *sizes, const int64_t *strides,         \
                   double *o) {                                                                \
        int64_t index[MAX_DIMS] = {0}, rows = 1, offset = 0, run = sizes[ndim - 1];            \
        T buffer[BLOCK];                                                                       \
        int64_t held = 0;                                                                      \
        for (int d = 0; d < ndim - 1; d++) rows *= sizes[d];                                   \
        for (int64_t r = 0; r < rows; r++) {                                                   \
            if (run >= BLOCK) {                                                                \
                NAME(x + offset, run, o);                                                      \
            } else {                                                                           \
                for (int64_t done = 0; done < run;) {                                          \
                    int64_t take = run - done < BLOCK - held ? run - done : BLOCK - held;      \
                    memcpy(buffer + held, x + offset + done, (size_t)take * sizeof(T));        \
                    held += take;                                                              \
                    done += take;                                                              \
                    if (held == BLOCK) {                                                       \
                        NAME(buffer, BLOCK, o);                                                \
                        held = 0;                                                              \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            for (int d = ndim - 2; d >= 0; d--) {                                              \
                offset += strides[d];                                                          \
                if (++index[d] < sizes[d]) break;                                              \
                offset -= strides[d] * sizes[d];                                               \
                index[d] = 0;                                                                  \
            }                                                                                  \
        }                                                                                      \
        if (held) NAME(buffer, held, o);                                                       \
    }

#ifdef _OPENMP
/* Built against the OpenMP runtime torch already loaded (native.py links that file), so
 * the team is torch's own intra-op threads, awake between ops: each sweeps one slice,
 * typically the half of the output it just wrote, still in its core's cache. */
int omp_get_thread_num(void);
int omp_get_num_threads(void);
#define MAX_THREADS 256
#define DEFINE_PARALLEL(NAME, T, W)                                                            \
    int NAME##_par(const T *x, int64_t n, double *o, int threads) {                            \
        double part[MAX_THREADS][9];                                                           \
        int team = 1;                                                                          \
        if (threads > MAX_THREADS) threads = MAX_THREADS;                                      \
        _Pragma("omp parallel num_threads(threads)")                                           \
        {                                                                                      \
            int t = omp_get_thread_num(), k = omp_get_num_threads();                           \
            int64_t per = n / k / W * W, begin = per * t, end = t == k - 1 ? n : begin + per;  \
            double *p = part[t];                                                               \
            p[0] = INFINITY; p[1] = -INFINITY;                                                 \
            for (int i = 2; i < 9; i++) p[i] = 0;                                              \
            NAME(x + begin, end - begin, p);                                                   \
            if (t == 0) team = k;                                                              \
        }                                                                                      \
        for (int t = 0; t < team; t++) {                                                       \
            if (part[t][0] < o[0]) o[0] = part[t][0];                                          \
            if (part[t][1] > o[1]) o[1] = part[t][1];                                          \
            for (int i = 2; i < 9; i++) o[i] += part[t][i];                                    \
        }                                                                                      \
        return team;                                                                           \
    }
#else
#define DEFINE_PARALLEL(NAME, T, W)                                                            \
    int NAME##_par(const T *x, int64_t n, double *o, int threads) {                            \
        (void)threads;                                                                         \
        NAME(x, n, o);                                                                         \
        return 1;                                                                              \
    }
#endif

DEFINE_STATS(ap_stats_f32, float, vf32, vi32, vu32, 16, load_f32, one_f32, min_f32, max_f32,
             umin_u32, umax_u32, 0x7fffffff, FLT_MAX, 1)
DEFINE_STATS(ap_stats_bf16, uint16_t, vf32, vi32, vu32, 16, load_bf16, one_bf16, min_f32, max_f32,
             umin_u32, umax_u32, 0x7fffffff, FLT_MAX, 1)
DEFINE_STATS(ap_stats_f64, double, vf64, vi64, vu64, 8, load_f64, one_f64, min_f64, max_f64,
             umin_u64, umax_u64, 0x7fffffffffffffffLL, DBL_MAX, 0)

DEFINE_PARALLEL(ap_stats_f32, float, 16)
DEFINE_PARALLEL(ap_stats_bf16, uint16_t, 16)
DEFINE_PARALLEL(ap_stats_f64, double, 8)

int ap_stats_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* Lets the loader check it has the library it expects. */
int ap_stats_version(void) { return 1; }
