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

/* A region of the malloc and leaky variants; malloc(0) may be NULL, which would read as a failure. */
static inline void *fs_malloc(int64_t bytes) { return malloc(bytes > 0 ? (size_t)bytes : 1); }

/* The scalar helpers, shared with the OpenCL back end: C99 has double, and libm names the
 * float form of a function with an f suffix (sqrtf). */
#define FS_HAVE_F64
#define FS_FLOAT_MATH(name) name##f
#include "fsmooth_scalar.h"
#undef FS_FLOAT_MATH
#undef FS_HAVE_F64

#endif /* FSMOOTH_RT_H */
