// Hand-written C++ for ADBench's four objectives, written the way ADBench's `manual` module is:
// plain loops over raw arrays, scratch allocated once per call, no library.  Compiled with
// `g++ -O3 -march=native` (benchmarks/adbench_impls.py).  The layouts are those of the F̃ kernels
// (tests/corpus/adbench_*.py), row-major, so that the same numpy arrays feed every implementation.
// The *_loop functions call an objective `calls` times (the memory ladder, DPS paper Fig. 12).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <vector>

namespace {

const double PI = 3.141592653589793;

double arr_max(int64_t n, const double *x) {
    double m = x[0];
    for (int64_t i = 1; i < n; i++) if (x[i] > m) m = x[i];
    return m;
}

double logsumexp(int64_t n, const double *x) {
    double mx = arr_max(n, x);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += std::exp(x[i] - mx);
    return std::log(s) + mx;
}

double log_gamma_distrib(double a, int64_t p) {
    double out = 0.25 * p * (p - 1) * std::log(PI);
    for (int64_t j = 0; j < p; j++) out += std::lgamma(a - 0.5 * j);
    return out;
}

// ----------------------------------------------------------------------------- GMM

// out = Q_k x with Q_k lower triangular: exp(icf[0:d]) on the diagonal, then the strict lower
// triangle packed column by column.
void q_times_x(int64_t d, const double *icf_k, const double *x, double *out) {
    for (int64_t i = 0; i < d; i++) out[i] = std::exp(icf_k[i]) * x[i];
    int64_t at = d;
    for (int64_t j = 0; j < d; j++)
        for (int64_t i = j + 1; i < d; i++) out[i] += icf_k[at++] * x[j];
}

}  // namespace

extern "C" double gmm_objective_manual(int64_t d, int64_t k, int64_t n, const double *alphas,
                                       const double *means, const double *icf, const double *x,
                                       double wishart_gamma, int64_t wishart_m) {
    const int64_t icf_size = d * (d + 1) / 2;
    std::vector<double> sum_qs(k), xcentered(d), qxcentered(d), main_term(k);
    for (int64_t ik = 0; ik < k; ik++) {
        sum_qs[ik] = 0.0;
        for (int64_t l = 0; l < d; l++) sum_qs[ik] += icf[ik * icf_size + l];
    }
    double slse = 0.0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t ik = 0; ik < k; ik++) {
            for (int64_t l = 0; l < d; l++) xcentered[l] = x[i * d + l] - means[ik * d + l];
            q_times_x(d, &icf[ik * icf_size], xcentered.data(), qxcentered.data());
            double sq = 0.0;
            for (int64_t l = 0; l < d; l++) sq += qxcentered[l] * qxcentered[l];
            main_term[ik] = alphas[ik] + sum_qs[ik] - 0.5 * sq;
        }
        slse += logsumexp(k, main_term.data());
    }
    const double constant = -0.5 * n * d * std::log(2.0 * PI);
    const double lse_alphas = logsumexp(k, alphas);
    // the Wishart prior
    const int64_t big_n = d + wishart_m + 1;
    const double c = big_n * d * (std::log(wishart_gamma) - 0.5 * std::log(2.0))
                     - log_gamma_distrib(0.5 * big_n, d);
    double prior = 0.0;
    for (int64_t ik = 0; ik < k; ik++) {
        double frobenius = 0.0;
        for (int64_t l = 0; l < d; l++) {
            double q = std::exp(icf[ik * icf_size + l]);
            frobenius += q * q;
        }
        for (int64_t l = d; l < icf_size; l++) frobenius += icf[ik * icf_size + l] * icf[ik * icf_size + l];
        prior += 0.5 * wishart_gamma * wishart_gamma * frobenius - wishart_m * sum_qs[ik];
    }
    prior -= k * c;
    return constant + slse - n * lse_alphas + prior;
}

// ----------------------------------------------------------------------------- BA

namespace {

void rodrigues_rotate_point(const double *rot, const double *x, double *out) {
    double sqtheta = rot[0] * rot[0] + rot[1] * rot[1] + rot[2] * rot[2];
    if (sqtheta != 0.0) {
        double theta = std::sqrt(sqtheta), costheta = std::cos(theta), sintheta = std::sin(theta);
        double w[3] = {rot[0] / theta, rot[1] / theta, rot[2] / theta};
        double w_cross_x[3] = {w[1] * x[2] - w[2] * x[1], w[2] * x[0] - w[0] * x[2],
                               w[0] * x[1] - w[1] * x[0]};
        double along = (w[0] * x[0] + w[1] * x[1] + w[2] * x[2]) * (1.0 - costheta);
        for (int i = 0; i < 3; i++) out[i] = x[i] * costheta + w_cross_x[i] * sintheta + w[i] * along;
    } else {
        double rot_cross_x[3] = {rot[1] * x[2] - rot[2] * x[1], rot[2] * x[0] - rot[0] * x[2],
                                 rot[0] * x[1] - rot[1] * x[0]};
        for (int i = 0; i < 3; i++) out[i] = x[i] + rot_cross_x[i];
    }
}

void project(const double *cam, const double *x, double *proj) {
    double xc[3] = {x[0] - cam[3], x[1] - cam[4], x[2] - cam[5]}, xcam[3];
    rodrigues_rotate_point(cam, xc, xcam);
    double p0 = xcam[0] / xcam[2], p1 = xcam[1] / xcam[2];
    double rsq = p0 * p0 + p1 * p1;
    double scale = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq;
    proj[0] = p0 * scale * cam[6] + cam[7];
    proj[1] = p1 * scale * cam[6] + cam[8];
}

}  // namespace

extern "C" void ba_objective_manual(int64_t p, const double *cams, const double *x, const double *w,
                                    const int64_t *obs, const double *feats, double *reproj_err,
                                    double *w_err) {
    for (int64_t i = 0; i < p; i++) {
        double proj[2];
        project(&cams[obs[2 * i] * 11], &x[obs[2 * i + 1] * 3], proj);
        reproj_err[2 * i] = w[i] * (proj[0] - feats[2 * i]);
        reproj_err[2 * i + 1] = w[i] * (proj[1] - feats[2 * i + 1]);
    }
    for (int64_t i = 0; i < p; i++) w_err[i] = 1.0 - w[i] * w[i];
}

// ----------------------------------------------------------------------------- Hand

namespace {

// c = a b, 4 × 4 row-major
void mat4_mult(const double *a, const double *b, double *c) {
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            double s = 0.0;
            for (int k = 0; k < 4; k++) s += a[4 * i + k] * b[4 * k + j];
            c[4 * i + j] = s;
        }
}

// the rotation by angle (sine s, cosine c) about the unit axis u, 3 × 3 row-major
void rotation_about(const double *u, double s, double c, double *r) {
    const double skew[9] = {0.0, -u[2], u[1], u[2], 0.0, -u[0], -u[1], u[0], 0.0};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            r[3 * i + j] = (i == j ? c : 0.0) + (1.0 - c) * u[i] * u[j] + s * skew[3 * i + j];
}

void angle_axis_to_rotation_matrix(const double *aa, double *r) {
    double norm = std::sqrt(aa[0] * aa[0] + aa[1] * aa[1] + aa[2] * aa[2]);
    if (norm < 0.0001) {
        for (int i = 0; i < 9; i++) r[i] = (i % 4 == 0) ? 1.0 : 0.0;
        return;
    }
    double u[3] = {aa[0] / norm, aa[1] / norm, aa[2] / norm};
    rotation_about(u, std::sin(norm), std::cos(norm), r);
}

// Rz(xzy[1]) Ry(xzy[2]) Rx(xzy[0]), 3 × 3 row-major
void euler_angles_to_rotation_matrix(const double *xzy, double *r) {
    double cx = std::cos(xzy[0]), sx = std::sin(xzy[0]);
    double cz = std::cos(xzy[1]), sz = std::sin(xzy[1]);
    double cy = std::cos(xzy[2]), sy = std::sin(xzy[2]);
    double rz[9] = {cz, -sz, 0, sz, cz, 0, 0, 0, 1};
    double ry[9] = {cy, 0, sy, 0, 1, 0, -sy, 0, cy};
    double rx[9] = {1, 0, 0, 0, cx, -sx, 0, sx, cx};
    double zy[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0.0;
            for (int k = 0; k < 3; k++) s += rz[3 * i + k] * ry[3 * k + j];
            zy[3 * i + j] = s;
        }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0.0;
            for (int k = 0; k < 3; k++) s += zy[3 * i + k] * rx[3 * k + j];
            r[3 * i + j] = s;
        }
}

// ADBench's to_pose_params: (B + 3) × 3, row 0 the global rotation, 1 the scale, 2 the
// translation, 3 + b bone b's Euler angles; per finger f (bones 2 + 4f ...): flexion and
// abduction of its first joint, flexion of the next two, nothing for the tip.
void to_pose_params(int64_t n_bones, const double *theta, double *pose) {
    std::memset(pose, 0, sizeof(double) * 3 * (n_bones + 3));
    for (int r = 0; r < 3; r++) {
        pose[r] = theta[r];
        pose[3 + r] = 1.0;
        pose[6 + r] = theta[3 + r];
    }
    const int64_t fingers = (n_bones - 2) / 4;
    for (int64_t f = 0; f < fingers; f++) {
        double *first = &pose[3 * (3 + 2 + 4 * f)];
        first[0] = theta[6 + 4 * f];
        first[1] = theta[6 + 4 * f + 1];
        first[3] = theta[6 + 4 * f + 2];
        first[6] = theta[6 + 4 * f + 3];
    }
}

}  // namespace

extern "C" void hand_objective_manual(int64_t n_bones, int64_t n_verts, int64_t n_corr,
                                      const double *theta, const int64_t *parents,
                                      const double *base_relatives,
                                      const double *inverse_base_absolutes,
                                      const double *base_positions, const double *weights,
                                      int64_t is_mirrored, const int64_t *correspondences,
                                      const double *points, double *err) {
    std::vector<double> pose(3 * (n_bones + 3)), relatives(16 * n_bones), absolutes(16 * n_bones),
        transforms(16 * n_bones), positions(3 * n_verts);
    to_pose_params(n_bones, theta, pose.data());
    for (int64_t b = 0; b < n_bones; b++) {
        double rot[9], local[16];
        euler_angles_to_rotation_matrix(&pose[3 * (3 + b)], rot);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                local[4 * i + j] = (i < 3 && j < 3) ? rot[3 * i + j] : (i == j ? 1.0 : 0.0);
        mat4_mult(&base_relatives[16 * b], local, &relatives[16 * b]);
    }
    for (int64_t b = 0; b < n_bones; b++) {
        if (parents[b] == -1) std::memcpy(&absolutes[16 * b], &relatives[16 * b], 16 * sizeof(double));
        else mat4_mult(&absolutes[16 * parents[b]], &relatives[16 * b], &absolutes[16 * b]);
        mat4_mult(&absolutes[16 * b], &inverse_base_absolutes[16 * b], &transforms[16 * b]);
    }
    // skinning bone by bone, as ADBench's manual module: each bone's transform of every vertex,
    // weighted into the positions
    std::fill(positions.begin(), positions.end(), 0.0);
    for (int64_t b = 0; b < n_bones; b++)
        for (int64_t v = 0; v < n_verts; v++)
            for (int r = 0; r < 3; r++) {
                double t = 0.0;
                for (int c = 0; c < 4; c++) t += transforms[16 * b + 4 * r + c] * base_positions[4 * v + c];
                positions[3 * v + r] += weights[b * n_verts + v] * t;
            }
    if (is_mirrored)
        for (int64_t v = 0; v < n_verts; v++) positions[3 * v] = -positions[3 * v];
    // the global transform, applied to every vertex (as ADBench's manual module does)
    double rot[9];
    angle_axis_to_rotation_matrix(&pose[0], rot);
    for (int64_t v = 0; v < n_verts; v++) {
        double vertex[3] = {positions[3 * v], positions[3 * v + 1], positions[3 * v + 2]};
        for (int r = 0; r < 3; r++) {
            double s = 0.0;
            for (int j = 0; j < 3; j++) s += rot[3 * r + j] * pose[3 + j] * vertex[j];
            positions[3 * v + r] = s + pose[6 + r];
        }
    }
    for (int64_t i = 0; i < n_corr; i++)
        for (int r = 0; r < 3; r++)
            err[3 * i + r] = points[3 * i + r] - positions[3 * correspondences[i] + r];
}

// ----------------------------------------------------------------------------- LSTM

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// one layer, in place on (hidden, cell); weight and bias are [forget | ingate | outgate | change]
void lstm_model(int64_t b, const double *weight, const double *bias, double *hidden, double *cell,
                const double *input) {
    for (int64_t i = 0; i < b; i++) {
        double forget = sigmoid(input[i] * weight[i] + bias[i]);
        double ingate = sigmoid(hidden[i] * weight[b + i] + bias[b + i]);
        double outgate = sigmoid(input[i] * weight[2 * b + i] + bias[2 * b + i]);
        double change = std::tanh(hidden[i] * weight[3 * b + i] + bias[3 * b + i]);
        cell[i] = cell[i] * forget + ingate * change;
        hidden[i] = outgate * std::tanh(cell[i]);
    }
}

}  // namespace

extern "C" double lstm_objective_manual(int64_t l, int64_t c, int64_t b, const double *main_params,
                                        const double *extra_params, const double *state_in,
                                        const double *sequence) {
    std::vector<double> state(state_in, state_in + 2 * l * b), input(b), ypred(b);
    double total = 0.0;
    for (int64_t t = 0; t + 1 < c; t++) {
        for (int64_t i = 0; i < b; i++) input[i] = sequence[t * b + i] * extra_params[i];
        const double *layer_input = input.data();
        for (int64_t layer = 0; layer < l; layer++) {
            double *hidden = &state[2 * layer * b];
            lstm_model(b, &main_params[2 * layer * 4 * b], &main_params[(2 * layer + 1) * 4 * b],
                       hidden, &state[(2 * layer + 1) * b], layer_input);
            layer_input = hidden;
        }
        double sum = 0.0;
        for (int64_t i = 0; i < b; i++) {
            ypred[i] = layer_input[i] * extra_params[b + i] + extra_params[2 * b + i];
            sum += std::exp(ypred[i]);
        }
        const double lse = std::log(sum + 2.0);
        for (int64_t i = 0; i < b; i++) total += sequence[(t + 1) * b + i] * (ypred[i] - lse);
    }
    return -total / ((c - 1) * b);
}

// ----------------------------------------------------------------------------- memory ladder loops
// Each call allocates its outputs, as a caller of ADBench's objective would; a value read from
// them is accumulated so that no call can be removed.

extern "C" double gmm_loop_manual(int64_t d, int64_t k, int64_t n, const double *alphas,
                                  const double *means, const double *icf, const double *x,
                                  double wishart_gamma, int64_t wishart_m, int64_t calls) {
    double acc = 0.0;
    for (int64_t it = 0; it < calls; it++)
        acc += gmm_objective_manual(d, k, n, alphas, means, icf, x, wishart_gamma, wishart_m);
    return acc;
}

extern "C" double ba_loop_manual(int64_t p, const double *cams, const double *x, const double *w,
                                 const int64_t *obs, const double *feats, int64_t calls) {
    double acc = 0.0;
    for (int64_t it = 0; it < calls; it++) {
        std::vector<double> reproj_err(2 * p), w_err(p);
        ba_objective_manual(p, cams, x, w, obs, feats, reproj_err.data(), w_err.data());
        acc += reproj_err[2 * (it % p)] + w_err[it % p];
    }
    return acc;
}

extern "C" double hand_loop_manual(int64_t n_bones, int64_t n_verts, int64_t n_corr,
                                   const double *theta, const int64_t *parents,
                                   const double *base_relatives, const double *inverse_base_absolutes,
                                   const double *base_positions, const double *weights,
                                   int64_t is_mirrored, const int64_t *correspondences,
                                   const double *points, int64_t calls) {
    double acc = 0.0;
    for (int64_t it = 0; it < calls; it++) {
        std::vector<double> err(3 * n_corr);
        hand_objective_manual(n_bones, n_verts, n_corr, theta, parents, base_relatives,
                              inverse_base_absolutes, base_positions, weights, is_mirrored,
                              correspondences, points, err.data());
        acc += err[3 * (it % n_corr)];
    }
    return acc;
}
