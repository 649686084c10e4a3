/* Uses the C that `fsmooth compile blur.py -o build` writes (see Makefile):
 *
 *     ./main ROWS COLS
 *
 * blurs and normalises a ROWS x COLS test image, takes a weighted mean and gathers pixels,
 * then shows the status codes of two bad calls.  The program owns all memory: one scratch
 * arena, allocated once at start-up with the size the kernels' *_scratch_bytes functions
 * give for the largest call, and the result buffers, sized by the *_shape functions.  The
 * kernels themselves never allocate. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "blur.h"

static int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Compiled with --parallel, every function of the library takes the most threads a call may
 * use as its last argument (its scratch is one slice per thread): here four. */
#ifdef BLUR_PARALLEL
#define NTHREADS , (int64_t)4
#else
#define NTHREADS
#endif

/* A kernel's status: 0 goes on, anything else is reported. */
static int report(const char *call, int status) {
    if (status != BLUR_STATUS_OK)
        printf("%s: status %d (%s)\n", call, status, blur_status_message(status));
    return status;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s ROWS COLS\n", argv[0]);
        return 2;
    }
    const int64_t rows = strtoll(argv[1], NULL, 10), cols = strtoll(argv[2], NULL, 10);
    if (rows < 1 || cols < 1) {
        fprintf(stderr, "ROWS and COLS must be >= 1\n");
        return 2;
    }
    const int64_t pixels = rows * cols, picks = 5;

    /* Inputs: a test image, a weight per column, and pixel numbers to gather. */
    double *img = malloc((size_t)pixels * sizeof *img);
    double *weights = malloc((size_t)cols * sizeof *weights);
    int64_t at[5];
    if (!img || !weights) return 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            img[r * cols + c] = 1.0 + (double)((r * 7 + c * 3) % 10);
    for (int64_t c = 0; c < cols; c++)
        weights[c] = 1.0 + (double)(c % 3);
    for (int64_t i = 0; i < picks; i++)
        at[i] = (i * 7) % pixels;

    /* One arena for every call below: the largest scratch any of them needs. */
    int64_t scratch_bytes = blur_blur_normalised_scratch_bytes(rows, cols NTHREADS);
    scratch_bytes = max_i64(scratch_bytes, blur_weighted_mean_scratch_bytes(cols, cols NTHREADS));
    scratch_bytes = max_i64(scratch_bytes, blur_gather_scratch_bytes(pixels, picks NTHREADS));
    void *arena = malloc(scratch_bytes > 0 ? (size_t)scratch_bytes : 1);

    /* The result's size comes from the shape function. */
    int64_t dims[2];
    blur_blur_normalised_shape(dims, rows, cols NTHREADS);
    double *smooth = malloc((size_t)(dims[0] * dims[1]) * sizeof *smooth);
    double gathered[5], mean = 0.0;
    if (!arena || !smooth) return 1;

    printf("scratch_bytes %lld\n", (long long)scratch_bytes);
    int failed = report("blur_normalised", blur_blur_normalised(arena, smooth, img, rows, cols NTHREADS));
    if (!failed) {
        printf("blur_normalised %lld %lld\n", (long long)dims[0], (long long)dims[1]);
        for (int64_t r = 0; r < dims[0]; r++)
            for (int64_t c = 0; c < dims[1]; c++)
                printf("%.17g%c", smooth[r * dims[1] + c], c + 1 < dims[1] ? ' ' : '\n');
    }
    /* The weighted mean of the first row. */
    failed |= report("weighted_mean", blur_weighted_mean(arena, &mean, img, cols, weights, cols NTHREADS));
    if (!failed) printf("weighted_mean %.17g\n", mean);
    failed |= report("gather", blur_gather(arena, gathered, img, pixels, at, picks NTHREADS));
    if (!failed) {
        printf("gather");
        for (int64_t i = 0; i < picks; i++) printf(" %.17g", gathered[i]);
        printf("\n");
    }

    /* Two bad calls: both are refused with a status, and nothing is read out of range. */
    int status = blur_weighted_mean(arena, &mean, img, cols, weights, cols - 1 NTHREADS);
    printf("weighted_mean with a short w: status %d (%s)\n", status, blur_status_message(status));
    at[picks - 1] = pixels;
    status = blur_gather(arena, gathered, img, pixels, at, picks NTHREADS);
    printf("gather past the end: status %d (%s)\n", status, blur_status_message(status));

    free(smooth);
    free(arena);
    free(weights);
    free(img);
    return failed ? 1 : 0;
}
