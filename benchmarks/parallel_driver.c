/* The C side of benchmarks/parallel.py --write-c: times the generated BA and GMM objectives
 * through their ABI, without Python (for a machine without cffi).  Built once per library:
 *
 *     cc -O2 [-fopenmp -DPARALLEL] -I. parallel_driver.c ba.c gmm.c -lm
 *
 * Inputs as ADBench's reader makes them: one camera, point, weight and feature tiled (each copy
 * jittered by a relative 1e-3), observation i = (i mod n, i mod m); GMM's uniform in ADBench's
 * ranges.  Prints, per objective, the median and the minimum of REPEAT timed calls (after one
 * warm-up), the scratch bytes and a checksum of the result (sequential and parallel must agree). */
#define _POSIX_C_SOURCE 200112L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef PARALLEL
#include <omp.h>
#define THREADS , (int64_t)omp_get_max_threads()
#else
#define THREADS
#endif

int adbench_ba_ba_objective(void *scratch, double *out_0, double *out_1, const double *cams, int64_t cams_d0,
                            int64_t cams_d1, const double *x, int64_t x_d0, int64_t x_d1, const double *w,
                            int64_t w_d0, const int64_t *obs, int64_t obs_d0, int64_t obs_d1,
                            const double *feats, int64_t feats_d0, int64_t feats_d1
#ifdef PARALLEL
                            , int64_t nthreads
#endif
                            );
int64_t adbench_ba_ba_objective_scratch_bytes(int64_t cams_d0, int64_t cams_d1, int64_t x_d0, int64_t x_d1,
                                              int64_t w_d0, int64_t obs_d0, int64_t obs_d1, int64_t feats_d0,
                                              int64_t feats_d1
#ifdef PARALLEL
                                              , int64_t nthreads
#endif
                                              );
int adbench_gmm_gmm_full_objective(void *scratch, double *out, const double *alphas, int64_t alphas_d0,
                                   const double *means, int64_t means_d0, int64_t means_d1, const double *icf,
                                   int64_t icf_d0, int64_t icf_d1, const double *x, int64_t x_d0, int64_t x_d1,
                                   double wishart_gamma, int64_t wishart_m
#ifdef PARALLEL
                                   , int64_t nthreads
#endif
                                   );
int64_t adbench_gmm_gmm_full_objective_scratch_bytes(int64_t alphas_d0, int64_t means_d0, int64_t means_d1,
                                                     int64_t icf_d0, int64_t icf_d1, int64_t x_d0, int64_t x_d1
#ifdef PARALLEL
                                                     , int64_t nthreads
#endif
                                                     );

enum { REPEAT = 21 };

static uint64_t state = 88172645463325252ull;
static double uniform(double lo, double hi) { /* xorshift64 */
    state ^= state << 13; state ^= state >> 7; state ^= state << 17;
    return lo + (hi - lo) * (double)(state >> 11) / 9007199254740992.0;
}
static double jitter(double v) { return v * (1.0 + 1e-3 * uniform(-1.0, 1.0)); }
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* The scratch, aligned as the ABI asks (K_SCRATCH_ALIGN, 64 bytes; malloc's 16 would put each
 * thread's slice at another offset in its cache lines and pages than fsmooth's arena does). */
static void *arena(int64_t nbytes) {
    void *p = NULL;
    return posix_memalign(&p, 64, nbytes > 0 ? (size_t)nbytes : 1) == 0 ? p : NULL;
}
static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static void report(const char *name, double *times, int64_t scratch, double checksum) {
    qsort(times, REPEAT, sizeof *times, by_value);
    printf("%s median_ms %.3f min_ms %.3f scratch_bytes %lld checksum %.12e\n", name, 1e3 * times[REPEAT / 2],
           1e3 * times[0], (long long)scratch, checksum);
}

static int ba(int64_t n, int64_t m, int64_t p) {
    const double camera[11] = {0.1, -0.2, 0.3, 0.05, -0.05, 0.1, 1.2, 0.01, -0.02, 0.05, -0.01};
    const double point[3] = {0.3, -0.4, 6.0}, feature[2] = {0.1, -0.2};
    double *cams = malloc(sizeof(double) * n * 11), *x = malloc(sizeof(double) * m * 3);
    double *w = malloc(sizeof(double) * p), *feats = malloc(sizeof(double) * p * 2);
    double *reproj = malloc(sizeof(double) * p * 2), *werr = malloc(sizeof(double) * p);
    int64_t *obs = malloc(sizeof(int64_t) * p * 2);
    for (int64_t i = 0; i < n * 11; i++) cams[i] = jitter(camera[i % 11]);
    for (int64_t i = 0; i < m * 3; i++) x[i] = jitter(point[i % 3]);
    for (int64_t i = 0; i < p; i++) {
        w[i] = jitter(0.9);
        feats[2 * i] = jitter(feature[0]);
        feats[2 * i + 1] = jitter(feature[1]);
        obs[2 * i] = i % n;
        obs[2 * i + 1] = i % m;
    }
    int64_t nbytes = adbench_ba_ba_objective_scratch_bytes(n, 11, m, 3, p, p, 2, p, 2 THREADS);
    void *scratch = arena(nbytes);
    if (!scratch) return 1;
    double times[REPEAT];
    for (int r = -1; r < REPEAT; r++) {
        double start = now();
        if (adbench_ba_ba_objective(scratch, reproj, werr, cams, n, 11, x, m, 3, w, p, obs, p, 2, feats, p, 2 THREADS))
            return 1;
        if (r >= 0) times[r] = now() - start;
    }
    double checksum = 0.0;
    for (int64_t i = 0; i < 2 * p; i++) checksum += reproj[i];
    for (int64_t i = 0; i < p; i++) checksum += werr[i];
    report("BA", times, nbytes, checksum);
    return 0;
}

static int gmm(int64_t d, int64_t k, int64_t n) {
    int64_t icf_len = d * (d + 1) / 2;
    double *alphas = malloc(sizeof(double) * k), *means = malloc(sizeof(double) * k * d);
    double *icf = malloc(sizeof(double) * k * icf_len), *x = malloc(sizeof(double) * n * d), out = 0.0;
    for (int64_t i = 0; i < k; i++) alphas[i] = uniform(-1.0, 1.0);
    for (int64_t i = 0; i < k * d; i++) means[i] = uniform(-2.0, 2.0);
    for (int64_t i = 0; i < k * icf_len; i++) icf[i] = i % icf_len < d ? uniform(-0.5, 0.5) : uniform(-1.0, 1.0);
    for (int64_t i = 0; i < n * d; i++) x[i] = uniform(-2.0, 2.0);
    int64_t nbytes = adbench_gmm_gmm_full_objective_scratch_bytes(k, k, d, k, icf_len, n, d THREADS);
    void *scratch = arena(nbytes);
    if (!scratch) return 1;
    double times[REPEAT];
    for (int r = -1; r < REPEAT; r++) {
        double start = now();
        if (adbench_gmm_gmm_full_objective(scratch, &out, alphas, k, means, k, d, icf, k, icf_len, x, n, d, 1.5, 2 THREADS))
            return 1;
        if (r >= 0) times[r] = now() - start;
    }
    report("GMM", times, nbytes, out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s BA_N BA_M BA_P GMM_D GMM_K GMM_N\n", argv[0]);
        return 2;
    }
    int64_t v[6];
    for (int i = 0; i < 6; i++) v[i] = strtoll(argv[i + 1], NULL, 10);
    return ba(v[0], v[1], v[2]) || gmm(v[3], v[4], v[5]);
}
