/* fsmooth's scalar helpers: F~'s scalar primitives with Python's semantics where C's differ
 * (floor division and modulo round toward negative infinity; min/max keep the first of equal
 * operands), the math built-ins under one name per type, and the range test of int(x).
 *
 * One text for both back ends: fsmooth_rt.h includes it in C99, and the OpenCL prelude
 * (dpia/codegen_opencl.py) pastes it into every OpenCL program.  So it includes nothing, and
 * its includer provides:
 *   int64_t, uint64_t, bool    the types;
 *   INT64_MIN, INT64_MAX       their limits;
 *   FS_FLOAT_MATH(name)        the float form of the libm function `name`: sqrtf in C, and
 *                              sqrt itself in OpenCL, whose math built-ins are overloaded;
 *   FS_HAVE_F64                defined where double exists: always in C, in OpenCL only for a
 *                              program that uses double (a device may have no fp64). */
#ifndef FSMOOTH_SCALAR_H
#define FSMOOTH_SCALAR_H

#ifndef FS_FLOAT_MATH
#error "define FS_FLOAT_MATH (and FS_HAVE_F64) before including fsmooth_scalar.h, as fsmooth_rt.h does"
#endif

/* Integer floor division and modulo; the divisor is never zero here (kernels check first).
 * INT64_MIN // -1 (2**63, beyond int64) never reaches these: where the range analysis cannot
 * prove a quotient fits, code generation calls fs_checked_floordiv_i64, which fails on it. */
static inline int64_t fs_floordiv_i64(int64_t a, int64_t b) {
    if (b == -1) return (int64_t)(0u - (uint64_t)a);
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
/* Integer ceiling division, Python's -(-a // b): a size rounded up to whole blocks. */
static inline int64_t fs_ceildiv_i64(int64_t a, int64_t b) {
    if (b == -1) return (int64_t)(0u - (uint64_t)a);
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) == (b < 0))) q += 1;
    return q;
}
static inline int64_t fs_mod_i64(int64_t a, int64_t b) {
    if (b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
/* Python's b % n for n >= 0, where a running remainder (dpia.strength_reduction) starts or
 * steps: no division where 0 <= b < n, as a remainder of the loop's first trip in a loop nested
 * in another mostly is; 0 where n is 0 (the remainder is then never read). */
static inline int64_t fs_running_mod_i64(int64_t b, int64_t n) {
    if (0 <= b && b < n) return b;
    return n == 0 ? 0 : fs_mod_i64(b, n);
}
/* The same by a divisor 2**k (k >= 1), for every a and without a test: >> of a negative int64
 * is arithmetic (sign-filling) in gcc and clang and so defined in OpenCL C, so a >> k is
 * floor(a / 2**k); in two's complement a & (2**k - 1) is Python's a % 2**k.  Functions, not
 * operators in the generated text, so that no precedence of >> or & meets the text around. */
static inline int64_t fs_shift_floor_i64(int64_t a, int k) { return a >> k; }
static inline int64_t fs_mask_mod_i64(int64_t a, int64_t mask) { return a & mask; }
static inline int64_t fs_abs_i64(int64_t a) { return a < 0 ? (int64_t)(0u - (uint64_t)a) : a; }

/* Checked int64 arithmetic, for the program's integer arithmetic and the sizes computed inside a
 * kernel body (a loop count, a region's bytes) where the range analysis cannot prove that they
 * fit: the exact result where it fits, else 0 with *overflow set (sticky), so the kernel fails
 * with FS_STATUS_INTEGER_OVERFLOW, as a reference Int64 raises OverflowError.  No operation overflows in C (CERT INT32-C's tests); a zero divisor also sets
 * *overflow, though kernels test divisors first (FS_STATUS_DIVISION_BY_ZERO). */
static inline int64_t fs_checked_add_i64(int64_t a, int64_t b, bool *overflow) {
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) { *overflow = true; return 0; }
    return a + b;
}
static inline int64_t fs_checked_sub_i64(int64_t a, int64_t b, bool *overflow) {
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) { *overflow = true; return 0; }
    return a - b;
}
static inline int64_t fs_checked_neg_i64(int64_t a, bool *overflow) {
    if (a == INT64_MIN) { *overflow = true; return 0; }
    return -a;
}
static inline int64_t fs_checked_mul_i64(int64_t a, int64_t b, bool *overflow) {
    bool wraps = a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
                       : (b > 0 ? a < INT64_MIN / b : (a != 0 && b < INT64_MAX / a));
    if (wraps) { *overflow = true; return 0; }
    return a * b;
}
static inline int64_t fs_checked_abs_i64(int64_t a, bool *overflow) {
    return a < 0 ? fs_checked_neg_i64(a, overflow) : a;
}
static inline int64_t fs_checked_floordiv_i64(int64_t a, int64_t b, bool *overflow) {
    if (b == 0 || (a == INT64_MIN && b == -1)) { *overflow = true; return 0; }
    return fs_floordiv_i64(a, b);
}
static inline int64_t fs_checked_ceildiv_i64(int64_t a, int64_t b, bool *overflow) {
    if (b == 0 || (a == INT64_MIN && b == -1)) { *overflow = true; return 0; }
    return fs_ceildiv_i64(a, b);
}
static inline int64_t fs_checked_mod_i64(int64_t a, int64_t b, bool *overflow) {
    if (b == 0) { *overflow = true; return 0; }
    return fs_mod_i64(a, b);
}

/* Python's min(a, b) is b only if b < a; max(a, b) is b only if b > a. */
#define FS_MINMAX(T, SUF)                                                        \
    static inline T fs_min_##SUF(T a, T b) { return b < a ? b : a; }           \
    static inline T fs_max_##SUF(T a, T b) { return b > a ? b : a; }
FS_MINMAX(int64_t, i64)
FS_MINMAX(bool, bool)

/* The math library (fs.tanh, ..., fs.isnan): libm's functions, IEEE semantics.  isnan, isinf
 * and isfinite are type-generic macros in C and overloaded built-ins returning int in OpenCL. */
#define FS_MATH_LIBRARY(T, SUF, MATH)                                            \
    static inline T fs_tanh_##SUF(T x) { return MATH(tanh)(x); }                \
    static inline T fs_sinh_##SUF(T x) { return MATH(sinh)(x); }                \
    static inline T fs_cosh_##SUF(T x) { return MATH(cosh)(x); }                \
    static inline T fs_asin_##SUF(T x) { return MATH(asin)(x); }                \
    static inline T fs_acos_##SUF(T x) { return MATH(acos)(x); }                \
    static inline T fs_atan_##SUF(T x) { return MATH(atan)(x); }                \
    static inline T fs_ceil_##SUF(T x) { return MATH(ceil)(x); }                \
    static inline T fs_trunc_##SUF(T x) { return MATH(trunc)(x); }              \
    static inline T fs_log1p_##SUF(T x) { return MATH(log1p)(x); }              \
    static inline T fs_expm1_##SUF(T x) { return MATH(expm1)(x); }              \
    static inline T fs_log2_##SUF(T x) { return MATH(log2)(x); }                \
    static inline T fs_log10_##SUF(T x) { return MATH(log10)(x); }              \
    static inline T fs_lgamma_##SUF(T x) { return MATH(lgamma)(x); }            \
    static inline T fs_erf_##SUF(T x) { return MATH(erf)(x); }                  \
    static inline T fs_erfc_##SUF(T x) { return MATH(erfc)(x); }                \
    static inline T fs_atan2_##SUF(T a, T b) { return MATH(atan2)(a, b); }      \
    static inline T fs_hypot_##SUF(T a, T b) { return MATH(hypot)(a, b); }      \
    static inline T fs_copysign_##SUF(T a, T b) { return MATH(copysign)(a, b); } \
    static inline bool fs_isnan_##SUF(T x) { return isnan(x) != 0; }            \
    static inline bool fs_isinf_##SUF(T x) { return isinf(x) != 0; }            \
    static inline bool fs_isfinite_##SUF(T x) { return isfinite(x) != 0; }

/* The helpers of the floating type T (name suffix SUF); MATH(f) is T's form of the libm
 * function f.  Python's float // and % are the result of divmod: r with the sign of b. */
#define FS_FLOATING(T, SUF, MATH)                                                \
    static inline T fs_mod_##SUF(T a, T b) {                                     \
        T r = MATH(fmod)(a, b);                                                  \
        if (r != 0) { if ((b < 0) != (r < 0)) r += b; }                          \
        else r = MATH(copysign)((T)0, b);                                        \
        return r;                                                                \
    }                                                                            \
    static inline T fs_floordiv_##SUF(T a, T b) {                                \
        T r = MATH(fmod)(a, b);                                                  \
        T q = (a - r) / b;                                                       \
        if (r != 0 && ((b < 0) != (r < 0))) q -= 1;                              \
        if (q != 0) {                                                            \
            T f = MATH(floor)(q);                                                \
            if (q - f > (T)0.5) f += 1;                                          \
            q = f;                                                               \
        } else q = MATH(copysign)((T)0, a / b);                                  \
        return q;                                                                \
    }                                                                            \
    static inline T fs_sqrt_##SUF(T x) { return MATH(sqrt)(x); }                \
    static inline T fs_exp_##SUF(T x) { return MATH(exp)(x); }                  \
    static inline T fs_log_##SUF(T x) { return MATH(log)(x); }                  \
    static inline T fs_sin_##SUF(T x) { return MATH(sin)(x); }                  \
    static inline T fs_cos_##SUF(T x) { return MATH(cos)(x); }                  \
    static inline T fs_tan_##SUF(T x) { return MATH(tan)(x); }                  \
    static inline T fs_floor_##SUF(T x) { return MATH(floor)(x); }              \
    static inline T fs_abs_##SUF(T x) { return MATH(fabs)(x); }                 \
    static inline T fs_pow_##SUF(T a, T b) { return MATH(pow)(a, b); }          \
    FS_MATH_LIBRARY(T, SUF, MATH)                                                \
    FS_MINMAX(T, SUF)

/* double's libm functions have the plain names in C and in OpenCL alike. */
#define FS_DOUBLE_MATH(name) name
FS_FLOATING(float, f32, FS_FLOAT_MATH)
#ifdef FS_HAVE_F64
FS_FLOATING(double, f64, FS_DOUBLE_MATH)
#endif

/* int(x) of a float: the cast to int64_t (truncation toward zero) is defined only for x in
 * [-2**63, 2**63); a NaN, an infinity or anything outside is status 5, which the kernel checks
 * with this first.  (Literals with the type's suffix: OpenCL may have no double.) */
static inline bool fs_int_fits_f32(float x) { return x >= -9223372036854775808.0f && x < 9223372036854775808.0f; }
#ifdef FS_HAVE_F64
static inline bool fs_int_fits_f64(double x) { return x >= -9223372036854775808.0 && x < 9223372036854775808.0; }
#endif

#undef FS_DOUBLE_MATH
#undef FS_FLOATING
#undef FS_MATH_LIBRARY
#undef FS_MINMAX

#endif /* FSMOOTH_SCALAR_H */
