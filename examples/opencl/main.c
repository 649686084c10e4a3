/* Uses the OpenCL host code that `fsmooth compile imaging.py -o build --target opencl` writes
 * (see Makefile):
 *
 *     ./main ROWS COLS [PLATFORM]
 *
 * blurs a ROWS x COLS test image on an OpenCL device, takes a weighted mean and gathers pixels,
 * then shows the status codes of two bad calls: a short weight vector (refused before anything
 * runs) and a pixel number past the end (found by the device).  PLATFORM picks the OpenCL
 * platform by part of its name ("oclgrind", "portable"); without it the context takes the first
 * GPU, else PoCL's CPU device.  The program owns the host arrays, sized by the *_shape
 * functions; the context owns everything on the device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "imaging.h"

/* A kernel's status: 0 goes on, anything else is reported with the context's message. */
static int report(struct imaging_context *ctx, const char *call, int status) {
    if (status != IMAGING_STATUS_OK) {
        char *error = imaging_context_get_error(ctx);
        printf("%s: status %d (%s): %s\n", call, status, imaging_status_message(status), error ? error : "");
        free(error);
    }
    return status;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s ROWS COLS [PLATFORM]\n", argv[0]);
        return 2;
    }
    const int64_t rows = strtoll(argv[1], NULL, 10), cols = strtoll(argv[2], NULL, 10);
    if (rows < 1 || cols < 1) {
        fprintf(stderr, "ROWS and COLS must be >= 1\n");
        return 2;
    }
    const int64_t pixels = rows * cols, picks = 5;

    struct imaging_context_config *cfg = imaging_context_config_new();
    if (!cfg) return 1;
    if (argc == 4) imaging_context_config_set_platform(cfg, argv[3]);
    struct imaging_context *ctx = imaging_context_new(cfg);
    if (!ctx) return 1;
    char *error = imaging_context_get_error(ctx);
    if (error) {
        fprintf(stderr, "no OpenCL context: %s\n", error);
        free(error);
        imaging_context_free(ctx);
        imaging_context_config_free(cfg);
        return 1;
    }

    /* Inputs: a test image, a weight per column, and pixel numbers to gather. */
    double *img = malloc((size_t)pixels * sizeof *img);
    double *weights = malloc((size_t)cols * sizeof *weights);
    int64_t at[5];
    int64_t dims[2];
    imaging_box_blur_shape(dims, rows, cols);
    double *smooth = malloc((size_t)(dims[0] * dims[1]) * sizeof *smooth);
    double gathered[5], mean = 0.0;
    if (!img || !weights || !smooth) return 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            img[r * cols + c] = 1.0 + (double)((r * 7 + c * 3) % 10);
    for (int64_t c = 0; c < cols; c++)
        weights[c] = 1.0 + (double)(c % 3);
    for (int64_t i = 0; i < picks; i++)
        at[i] = (i * 7) % pixels;

    int failed = report(ctx, "box_blur", imaging_box_blur(ctx, smooth, img, rows, cols));
    if (!failed) {
        printf("box_blur %lld %lld\n", (long long)dims[0], (long long)dims[1]);
        for (int64_t r = 0; r < dims[0]; r++)
            for (int64_t c = 0; c < dims[1]; c++)
                printf("%.17g%c", smooth[r * dims[1] + c], c + 1 < dims[1] ? ' ' : '\n');
    }
    /* The weighted mean of the first row. */
    failed |= report(ctx, "weighted_mean", imaging_weighted_mean(ctx, &mean, img, cols, weights, cols));
    if (!failed) printf("weighted_mean %.17g\n", mean);
    failed |= report(ctx, "gather", imaging_gather(ctx, gathered, img, pixels, at, picks));
    if (!failed) {
        printf("gather");
        for (int64_t i = 0; i < picks; i++) printf(" %.17g", gathered[i]);
        printf("\n");
    }

    /* Two bad calls: both are refused with a status, and nothing is read out of range. */
    report(ctx, "weighted_mean with a short w", imaging_weighted_mean(ctx, &mean, img, cols, weights, cols - 1));
    at[picks - 1] = pixels;
    report(ctx, "gather past the end", imaging_gather(ctx, gathered, img, pixels, at, picks));

    free(smooth);
    free(weights);
    free(img);
    imaging_context_free(ctx);
    imaging_context_config_free(cfg);
    return failed ? 1 : 0;
}
