/* fsmooth run-time header: everything generated C needs, and nothing else.
 *
 * Generated kernels never allocate: the caller passes one scratch arena of
 * K_scratch_bytes(...) bytes, and every region is `scratch + offset` with a static offset.
 * (Only the DPS paper's comparison variants, compiled on request, take regions from malloc.)
 * The helpers below give F̃'s scalar primitives Python's semantics where C's differ
 * (floor division and modulo round toward negative infinity; min/max keep the first of
 * equal operands).  Status codes returned by kernels: see FS_STATUS_*. */
#ifndef FSMOOTH_RT_H
#define FSMOOTH_RT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define FS_STATUS_OK 0
#define FS_STATUS_INDEX_OUT_OF_RANGE 1
#define FS_STATUS_DIVISION_BY_ZERO 2
#define FS_STATUS_SIZE_CONSTRAINT 3
#define FS_STATUS_OUT_OF_MEMORY 4

/* A region of the malloc and leaky variants; malloc(0) may be NULL, which would read as a failure. */
static inline void *fs_malloc(int64_t bytes) { return malloc(bytes > 0 ? (size_t)bytes : 1); }

/* Integer floor division and modulo; the divisor is never zero here (kernels check first).
 * INT64_MIN / -1 wraps as Python's arbitrary-precision result would not fit anyway. */
static inline int64_t fs_floordiv_i64(int64_t a, int64_t b) {
    if (b == -1) return (int64_t)(0u - (uint64_t)a);
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
static inline int64_t fs_mod_i64(int64_t a, int64_t b) {
    if (b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

/* Python's float // and %: the result of divmod, r with the sign of b. */
#define FS_FLOAT_DIVMOD(T, SUF, FMOD, FLOOR)                                      \
    static inline T fs_mod_##SUF(T a, T b) {                                     \
        T r = FMOD(a, b);                                                        \
        if (r != 0) { if ((b < 0) != (r < 0)) r += b; }                          \
        else r = (T)copysign(0.0, (double)b);                                    \
        return r;                                                                \
    }                                                                            \
    static inline T fs_floordiv_##SUF(T a, T b) {                                \
        T r = FMOD(a, b);                                                        \
        T q = (a - r) / b;                                                       \
        if (r != 0 && ((b < 0) != (r < 0))) q -= 1;                              \
        if (q != 0) {                                                            \
            T f = FLOOR(q);                                                      \
            if (q - f > (T)0.5) f += 1;                                          \
            q = f;                                                               \
        } else q = (T)copysign(0.0, (double)(a / b));                            \
        return q;                                                                \
    }
FS_FLOAT_DIVMOD(double, f64, fmod, floor)
FS_FLOAT_DIVMOD(float, f32, fmodf, floorf)
#undef FS_FLOAT_DIVMOD

#define FS_UNARY(NAME, F64, F32)                                                 \
    static inline double fs_##NAME##_f64(double x) { return F64(x); }            \
    static inline float fs_##NAME##_f32(float x) { return F32(x); }
FS_UNARY(sqrt, sqrt, sqrtf)
FS_UNARY(exp, exp, expf)
FS_UNARY(log, log, logf)
FS_UNARY(sin, sin, sinf)
FS_UNARY(cos, cos, cosf)
FS_UNARY(tan, tan, tanf)
FS_UNARY(floor, floor, floorf)
FS_UNARY(abs, fabs, fabsf)
#undef FS_UNARY

static inline double fs_pow_f64(double a, double b) { return pow(a, b); }
static inline float fs_pow_f32(float a, float b) { return powf(a, b); }
static inline int64_t fs_abs_i64(int64_t a) { return a < 0 ? (int64_t)(0u - (uint64_t)a) : a; }

/* Python's min(a, b) is b only if b < a; max(a, b) is b only if b > a. */
#define FS_MINMAX(T, SUF)                                                        \
    static inline T fs_min_##SUF(T a, T b) { return b < a ? b : a; }           \
    static inline T fs_max_##SUF(T a, T b) { return b > a ? b : a; }
FS_MINMAX(double, f64)
FS_MINMAX(float, f32)
FS_MINMAX(int64_t, i64)
FS_MINMAX(bool, bool)
#undef FS_MINMAX

#endif /* FSMOOTH_RT_H */
