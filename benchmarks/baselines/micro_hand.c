/* Hand-written C for the micro-benchmarks: what a C programmer writes -- one fused loop into a
   buffer allocated once, outside the iteration loop.  Same arithmetic and consumer as
   benchmarks/micro_kernels.py. */
#include <stdint.h>
#include <stdlib.h>

double add3_loop_hand(const double *a, const double *b, const double *c, int64_t n, int64_t iters) {
    double *t = malloc(sizeof(double) * (size_t)n);
    double acc = 0.0;
    for (int64_t it = 0; it < iters; it++) {
        for (int64_t i = 0; i < n; i++) t[i] = (a[i] + b[i]) + c[i];
        acc = acc + (t[it % n] + t[(it * 7 + 1) % n]);
    }
    free(t);
    return acc;
}

double cross_loop_hand(const double *a, const double *b, int64_t iters) {
    double t[3];
    double acc = 0.0;
    for (int64_t it = 0; it < iters; it++) {
        t[0] = a[1] * b[2] - a[2] * b[1];
        t[1] = a[2] * b[0] - a[0] * b[2];
        t[2] = a[0] * b[1] - a[1] * b[0];
        acc = acc + (t[it % 3] + t[(it * 7 + 1) % 3]);
    }
    return acc;
}
