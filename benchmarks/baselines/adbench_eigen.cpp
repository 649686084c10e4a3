// Eigen versions of ADBench's four objectives: idiomatic Eigen, matrices and vectors as
// Eigen::Map over the same row-major numpy arrays that feed every other implementation.
// Compiled with `g++ -O3 -march=native -DNDEBUG` (benchmarks/adbench_impls.py).
#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <vector>

using Eigen::ArrayXd;
using Eigen::Dynamic;
using Eigen::Map;
using Eigen::Matrix3d;
using Eigen::Matrix4d;
using Eigen::MatrixXd;
using Eigen::Vector2d;
using Eigen::Vector3d;
using Eigen::VectorXd;
using RowMatrix = Eigen::Matrix<double, Dynamic, Dynamic, Eigen::RowMajor>;
using RowMatrix4 = Eigen::Matrix<double, 4, 4, Eigen::RowMajor>;

namespace {

const double PI = 3.141592653589793;

double logsumexp(const Eigen::Ref<const VectorXd> &x) {
    double mx = x.maxCoeff();
    return std::log((x.array() - mx).exp().sum()) + mx;
}

}  // namespace

extern "C" double gmm_objective_eigen(int64_t d, int64_t k, int64_t n, const double *alphas_p,
                                      const double *means_p, const double *icf_p, const double *x_p,
                                      double wishart_gamma, int64_t wishart_m) {
    const int64_t icf_size = d * (d + 1) / 2;
    Map<const VectorXd> alphas(alphas_p, k);
    Map<const RowMatrix> means(means_p, k, d), icf(icf_p, k, icf_size), x(x_p, n, d);
    // Q_k as dense lower-triangular matrices, built once per call
    std::vector<MatrixXd> qs(k, MatrixXd::Zero(d, d));
    VectorXd sum_qs(k);
    for (int64_t ik = 0; ik < k; ik++) {
        int64_t at = d;
        for (int64_t j = 0; j < d; j++) {
            qs[ik](j, j) = std::exp(icf(ik, j));
            for (int64_t i = j + 1; i < d; i++) qs[ik](i, j) = icf(ik, at++);
        }
        sum_qs[ik] = icf.row(ik).head(d).sum();
    }
    VectorXd main_term(k);
    double slse = 0.0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t ik = 0; ik < k; ik++) {
            VectorXd xc = (x.row(i) - means.row(ik)).transpose();
            main_term[ik] = alphas[ik] + sum_qs[ik]
                            - 0.5 * (qs[ik].triangularView<Eigen::Lower>() * xc).squaredNorm();
        }
        slse += logsumexp(main_term);
    }
    const int64_t big_n = d + wishart_m + 1;
    double lgamma_d = 0.25 * d * (d - 1) * std::log(PI);
    for (int64_t j = 0; j < d; j++) lgamma_d += std::lgamma(0.5 * big_n - 0.5 * j);
    const double c = big_n * d * (std::log(wishart_gamma) - 0.5 * std::log(2.0)) - lgamma_d;
    double prior = 0.0;
    for (int64_t ik = 0; ik < k; ik++)
        prior += 0.5 * wishart_gamma * wishart_gamma * qs[ik].squaredNorm() - wishart_m * sum_qs[ik];
    return -0.5 * n * d * std::log(2.0 * PI) + slse - n * logsumexp(alphas) + prior - k * c;
}

namespace {

Vector3d rodrigues_rotate_point(const Vector3d &rot, const Vector3d &x) {
    double sqtheta = rot.squaredNorm();
    if (sqtheta != 0.0) {
        double theta = std::sqrt(sqtheta), costheta = std::cos(theta), sintheta = std::sin(theta);
        Vector3d w = rot / theta;
        return x * costheta + w.cross(x) * sintheta + w * (w.dot(x) * (1.0 - costheta));
    }
    return x + rot.cross(x);
}

}  // namespace

extern "C" void ba_objective_eigen(int64_t p, const double *cams, const double *x, const double *w,
                                   const int64_t *obs, const double *feats, double *reproj_err,
                                   double *w_err) {
    for (int64_t i = 0; i < p; i++) {
        Map<const Eigen::Matrix<double, 11, 1>> cam(&cams[obs[2 * i] * 11]);
        Map<const Vector3d> point(&x[obs[2 * i + 1] * 3]);
        Vector3d xcam = rodrigues_rotate_point(cam.head<3>(), point - cam.segment<3>(3));
        Vector2d proj = xcam.head<2>() / xcam[2];
        double rsq = proj.squaredNorm();
        proj = proj * (1.0 + cam[9] * rsq + cam[10] * rsq * rsq) * cam[6] + cam.segment<2>(7);
        Map<Vector2d> out(&reproj_err[2 * i]);
        out = w[i] * (proj - Map<const Vector2d>(&feats[2 * i]));
    }
    Map<ArrayXd>(w_err, p) = 1.0 - Map<const ArrayXd>(w, p).square();
}

namespace {

Matrix3d rotation_about(const Vector3d &u, double s, double c) {
    Matrix3d skew;
    skew << 0.0, -u[2], u[1], u[2], 0.0, -u[0], -u[1], u[0], 0.0;
    return c * Matrix3d::Identity() + (1.0 - c) * u * u.transpose() + s * skew;
}

}  // namespace

extern "C" void hand_objective_eigen(int64_t n_bones, int64_t n_verts, int64_t n_corr,
                                     const double *theta, const int64_t *parents,
                                     const double *base_relatives,
                                     const double *inverse_base_absolutes,
                                     const double *base_positions, const double *weights,
                                     int64_t is_mirrored, const int64_t *correspondences,
                                     const double *points, double *err) {
    // pose parameters (ADBench's to_pose_params), (B + 3) × 3
    RowMatrix pose = RowMatrix::Zero(n_bones + 3, 3);
    pose.row(0) = Map<const Vector3d>(theta).transpose();
    pose.row(1).setOnes();
    pose.row(2) = Map<const Vector3d>(theta + 3).transpose();
    for (int64_t f = 0; f < (n_bones - 2) / 4; f++) {
        int64_t row = 5 + 4 * f;
        pose(row, 0) = theta[6 + 4 * f];
        pose(row, 1) = theta[6 + 4 * f + 1];
        pose(row + 1, 0) = theta[6 + 4 * f + 2];
        pose(row + 2, 0) = theta[6 + 4 * f + 3];
    }
    std::vector<Matrix4d> absolutes(n_bones);
    MatrixXd transformed = MatrixXd::Zero(3, n_verts);
    Map<const RowMatrix> base(base_positions, n_verts, 4), skin(weights, n_bones, n_verts);
    for (int64_t b = 0; b < n_bones; b++) {
        const Vector3d xzy = pose.row(3 + b).transpose();
        Matrix3d rot = (Eigen::AngleAxisd(xzy[1], Vector3d::UnitZ())
                        * Eigen::AngleAxisd(xzy[2], Vector3d::UnitY())
                        * Eigen::AngleAxisd(xzy[0], Vector3d::UnitX())).toRotationMatrix();
        Matrix4d local = Matrix4d::Identity();
        local.topLeftCorner<3, 3>() = rot;
        Matrix4d relative = Map<const RowMatrix4>(&base_relatives[16 * b]) * local;
        absolutes[b] = parents[b] == -1 ? relative : Matrix4d(absolutes[parents[b]] * relative);
        Matrix4d transform = absolutes[b] * Map<const RowMatrix4>(&inverse_base_absolutes[16 * b]);
        transformed += ((transform.topRows<3>() * base.transpose()).array().rowwise()
                        * skin.row(b).array()).matrix();
    }
    if (is_mirrored) transformed.row(0) *= -1.0;
    const Vector3d aa = pose.row(0).transpose();
    double norm = aa.norm();
    Matrix3d global = norm < 0.0001 ? Matrix3d::Identity()
                                     : rotation_about(aa / norm, std::sin(norm), std::cos(norm));
    MatrixXd positions = (global * pose.row(1).transpose().asDiagonal() * transformed).colwise()
                         + pose.row(2).transpose();
    for (int64_t i = 0; i < n_corr; i++) {
        Map<Vector3d> out(&err[3 * i]);
        out = Map<const Vector3d>(&points[3 * i]) - positions.col(correspondences[i]);
    }
}

extern "C" double lstm_objective_eigen(int64_t l, int64_t c, int64_t b, const double *main_params,
                                       const double *extra_params, const double *state_in,
                                       const double *sequence) {
    Map<const RowMatrix> main(main_params, 2 * l, 4 * b), extra(extra_params, 3, b), seq(sequence, c, b);
    RowMatrix state = Map<const RowMatrix>(state_in, 2 * l, b);
    auto sigmoid = [](const ArrayXd &x) -> ArrayXd { return 1.0 / (1.0 + (-x).exp()); };
    double total = 0.0;
    ArrayXd input(b);
    for (int64_t t = 0; t + 1 < c; t++) {
        input = seq.row(t).array().transpose() * extra.row(0).array().transpose();
        for (int64_t layer = 0; layer < l; layer++) {
            ArrayXd w = main.row(2 * layer).transpose(), bias = main.row(2 * layer + 1).transpose();
            ArrayXd hidden = state.row(2 * layer).transpose(), cell = state.row(2 * layer + 1).transpose();
            ArrayXd forget = sigmoid(input * w.segment(0, b) + bias.segment(0, b));
            ArrayXd ingate = sigmoid(hidden * w.segment(b, b) + bias.segment(b, b));
            ArrayXd outgate = sigmoid(input * w.segment(2 * b, b) + bias.segment(2 * b, b));
            ArrayXd change = (hidden * w.segment(3 * b, b) + bias.segment(3 * b, b)).tanh();
            cell = cell * forget + ingate * change;
            hidden = outgate * cell.tanh();
            state.row(2 * layer) = hidden.transpose();
            state.row(2 * layer + 1) = cell.transpose();
            input = hidden;
        }
        ArrayXd ypred = input * extra.row(1).array().transpose() + extra.row(2).array().transpose();
        double lse = std::log(ypred.exp().sum() + 2.0);
        total += (seq.row(t + 1).array().transpose() * (ypred - lse)).sum();
    }
    return -total / ((c - 1) * b);
}
