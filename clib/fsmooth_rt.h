/* fsmooth run-time header: everything generated C needs, and nothing else.
 *
 * Generated kernels never allocate: the caller passes one scratch arena of
 * K_scratch_bytes(...) bytes, and every region is `scratch + offset` with a static offset.
 * (Only the DPS paper's comparison variants, compiled on request, take regions from malloc.)
 * The scalar helpers (fsmooth_scalar.h) give F̃'s scalar primitives Python's semantics where
 * C's differ.  Status codes returned by kernels: see FS_STATUS_*. */
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
#define FS_STATUS_INTEGER_CONVERSION 5
#define FS_STATUS_INTEGER_OVERFLOW 6

/* Whether a loop's second version for rows exactly as wide as the kernel reads them runs
 * (fsmooth.dpia.row_versions): where the target has AVX-512's two-source permutes, gcc loads such
 * rows as whole vectors and shuffles them cheaply; elsewhere its loads of a run-time stride, lane
 * by lane, are the faster (ADBench's Hand skinning, gcc 12: 11 % less time with AVX-512, 14 % more
 * with AVX2 and 12 % more with SSE2 in the constant-stride version), and the version is dead code.
 * A build may decide it: -DFS_ROW_VERSIONS=true (or false). */
#ifndef FS_ROW_VERSIONS
#if defined(__AVX512F__) && defined(__AVX512VL__)
#define FS_ROW_VERSIONS true
#else
#define FS_ROW_VERSIONS false
#endif
#endif

/* A region of the malloc and leaky variants; malloc(0) may be NULL, which would read as a failure. */
static inline void *fs_malloc(int64_t bytes) { return malloc(bytes > 0 ? (size_t)bytes : 1); }

/* The scalar helpers, shared with the OpenCL back end: C99 has double, and libm names the
 * float form of a function with an f suffix (sqrtf). */
#define FS_HAVE_F64
#define FS_FLOAT_MATH(name) name##f
#include "fsmooth_scalar.h"
#undef FS_FLOAT_MATH
#undef FS_HAVE_F64

/* Checked size arithmetic, for the shape, scratch and size-check functions: a size that overflows
 * int64 or divides by zero is FS_SIZE_POISON, which every operation passes on and every relation
 * fails on, so K_check_sizes refuses the sizes instead of running with a wrapped size. */
#define FS_SIZE_POISON INT64_MIN
static inline int64_t fs_size_add(int64_t a, int64_t b) {
    if (a == FS_SIZE_POISON || b == FS_SIZE_POISON || (b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN + 1 - b))
        return FS_SIZE_POISON;
    return a + b;
}
static inline int64_t fs_size_sub(int64_t a, int64_t b) {
    if (a == FS_SIZE_POISON || b == FS_SIZE_POISON || (b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + 1 + b))
        return FS_SIZE_POISON;
    return a - b;
}
static inline int64_t fs_size_neg(int64_t a) { return a == FS_SIZE_POISON ? FS_SIZE_POISON : -a; }
static inline int64_t fs_size_mul(int64_t a, int64_t b) {
    if (a == FS_SIZE_POISON || b == FS_SIZE_POISON) return FS_SIZE_POISON;
    if (a == 0 || b == 0) return 0;
    /* neither is INT64_MIN (the poison), so their magnitudes are int64s */
    if ((a < 0 ? -a : a) > INT64_MAX / (b < 0 ? -b : b)) return FS_SIZE_POISON;
    return a * b;
}
static inline int64_t fs_size_floordiv(int64_t a, int64_t b) {
    return (a == FS_SIZE_POISON || b == FS_SIZE_POISON || b == 0) ? FS_SIZE_POISON : fs_floordiv_i64(a, b);
}
static inline int64_t fs_size_ceildiv(int64_t a, int64_t b) {
    return (a == FS_SIZE_POISON || b == FS_SIZE_POISON || b == 0) ? FS_SIZE_POISON : fs_ceildiv_i64(a, b);
}
static inline int64_t fs_size_mod(int64_t a, int64_t b) {
    return (a == FS_SIZE_POISON || b == FS_SIZE_POISON || b == 0) ? FS_SIZE_POISON : fs_mod_i64(a, b);
}
static inline int64_t fs_size_max(int64_t a, int64_t b) {
    return (a == FS_SIZE_POISON || b == FS_SIZE_POISON) ? FS_SIZE_POISON : (a > b ? a : b);
}
static inline int64_t fs_size_min(int64_t a, int64_t b) {
    return (a == FS_SIZE_POISON || b == FS_SIZE_POISON) ? FS_SIZE_POISON : (a < b ? a : b);
}
/* The status of a kernel whose K_check_sizes answered `failed` (nonzero), for a kernel of
 * `constraints` size constraints: one of them violated, a size that overflows int64
 * (constraints + 1), a size divided by zero (constraints + 2). */
static inline int fs_size_status(int failed, int constraints) {
    return failed <= constraints ? FS_STATUS_SIZE_CONSTRAINT
         : failed == constraints + 1 ? FS_STATUS_INTEGER_OVERFLOW : FS_STATUS_DIVISION_BY_ZERO;
}
/* a relation of two sizes: false where either is poison */
static inline int fs_size_ge(int64_t a, int64_t b) { return a != FS_SIZE_POISON && b != FS_SIZE_POISON && a >= b; }
static inline int fs_size_gt(int64_t a, int64_t b) { return a != FS_SIZE_POISON && b != FS_SIZE_POISON && a > b; }
static inline int fs_size_le(int64_t a, int64_t b) { return a != FS_SIZE_POISON && b != FS_SIZE_POISON && a <= b; }
static inline int fs_size_lt(int64_t a, int64_t b) { return a != FS_SIZE_POISON && b != FS_SIZE_POISON && a < b; }
static inline int fs_size_eq(int64_t a, int64_t b) { return a != FS_SIZE_POISON && b != FS_SIZE_POISON && a == b; }
static inline int fs_size_ne(int64_t a, int64_t b) { return a != FS_SIZE_POISON && b != FS_SIZE_POISON && a != b; }

#endif /* FSMOOTH_RT_H */
