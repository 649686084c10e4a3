// Eigen versions of the micro-benchmarks: idiomatic Eigen, one expression per iteration.
#include <Eigen/Dense>
#include <cstdint>

extern "C" double add3_loop_eigen(const double *a, const double *b, const double *c, int64_t n, int64_t iters) {
    Eigen::Map<const Eigen::VectorXd> va(a, n), vb(b, n), vc(c, n);
    double acc = 0.0;
    for (int64_t it = 0; it < iters; it++) {
        Eigen::VectorXd t = va + vb + vc;
        acc = acc + (t[it % n] + t[(it * 7 + 1) % n]);
    }
    return acc;
}

extern "C" double cross_loop_eigen(const double *a, const double *b, int64_t iters) {
    Eigen::Map<const Eigen::Vector3d> va(a), vb(b);
    double acc = 0.0;
    for (int64_t it = 0; it < iters; it++) {
        Eigen::Vector3d t = va.cross(vb);
        acc = acc + (t[it % 3] + t[(it * 7 + 1) % 3]);
    }
    return acc;
}
