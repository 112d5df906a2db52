// Lloyd iteration on the exact coordinate density of a random unit vector (codebook.h).
//
// The density on [0, 1] (by symmetry only the positive half is iterated) is
//   f(t) = c (1 − t²)^k,  k = (g − 3) / 2.
// Cell masses use a cumulative trapezoid table on a uniform grid of 1,000,001 points (plus a
// trapezoid on the partial sub-interval at each end); cell first moments use the closed form
//   ∫ t (1 − t²)^k dt = −(1 − t²)^(k+1) / (2 (k + 1)).
// Lloyd's two conditions are iterated until no level moves by more than 1e-14.
#include "turbokv/codec/codebook.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace turbokv::codec {
namespace {

constexpr int kGridIntervals = 1000000;
constexpr double kTolerance = 1e-14;
// 256 levels: Lloyd's slowest mode contracts very slowly; 1e-11 keeps start-up under ~0.5 s
// per group size while g·MSE is already converged to ~1e-12.
constexpr double kTolerance8 = 1e-11;
constexpr int kMaxIterations = 200000;

class Density {
 public:
  // Density ∝ (1 − t²)^k on [0, 1].
  explicit Density(double k) : k_(k), h_(1.0 / kGridIntervals) {
    raw_.resize(kGridIntervals + 1);
    cum_.resize(kGridIntervals + 1);
    for (int i = 0; i <= kGridIntervals; ++i) raw_[i] = Raw(i * h_);
    cum_[0] = 0.0;
    for (int i = 1; i <= kGridIntervals; ++i) {
      cum_[i] = cum_[i - 1] + 0.5 * h_ * (raw_[i - 1] + raw_[i]);
    }
    norm_ = 0.5 / cum_[kGridIntervals];  // the positive half has mass 1/2
    moment0_ = -1.0 / (2.0 * (k_ + 1.0));
  }

  // Normalized mass and first moment of [0, t].
  void Eval(double t, double* mass, double* moment) const {
    t = std::clamp(t, 0.0, 1.0);
    const int i = std::min(static_cast<int>(t / h_), kGridIntervals - 1);
    const double s = 1.0 - t * t;
    const double raw = Raw(t);
    *mass = norm_ * (cum_[i] + 0.5 * (t - i * h_) * (raw_[i] + raw));
    // ∫_0^t x (1 − x²)^k dx = [−(1 − x²)^(k+1) / (2 (k + 1))]_0^t
    *moment = norm_ * (-raw * s / (2.0 * (k_ + 1.0)) - moment0_);
  }
  double Mass(double t) const {
    double mass, moment;
    Eval(t, &mass, &moment);
    return mass;
  }

 private:
  double Raw(double t) const {
    const double s = 1.0 - t * t;
    return s <= 0.0 ? 0.0 : std::exp(k_ * std::log(s));
  }

  double k_;
  double h_;
  double norm_ = 1.0;
  double moment0_ = 0.0;
  std::vector<double> raw_;
  std::vector<double> cum_;
};

// Smallest power-of-two bucket count (from 2^b) for which no bucket holds more than two
// thresholds.
void BuildBuckets(Codebook& cb) {
  const int n = static_cast<int>(cb.thresholds.size());
  cb.thresholds_padded = cb.thresholds;
  cb.thresholds_padded.push_back(std::numeric_limits<float>::infinity());
  cb.thresholds_padded.push_back(std::numeric_limits<float>::infinity());
  cb.bucket_lo = cb.thresholds.front();
  const float span = cb.thresholds.back() - cb.thresholds.front();
  for (int buckets = 1 << cb.bits; buckets <= (1 << 20); buckets *= 2) {
    cb.buckets = buckets;
    cb.bucket_scale = span > 0 ? static_cast<float>(buckets) / span : 1.0f;
    std::vector<int> count(buckets, 0);
    int worst = 0;
    for (float t : cb.thresholds) worst = std::max(worst, ++count[CodebookBucket(cb, t)]);
    if (worst <= 2) {
      cb.bucket_base.assign(buckets, 0);
      int below = 0;
      for (int k = 0; k < buckets; ++k) {
        cb.bucket_base[k] = below;
        below += count[k];
      }
      (void)n;
      return;
    }
  }
  cb.buckets = 0;  // no table: the SIMD paths fall back to the binary search
}

Codebook Compute(int g, int bits) {
  const Density d((g - 3) / 2.0);
  const int levels = 1 << bits;
  const int m = levels / 2;  // positive levels
  // Start from the high-resolution optimum (Panter–Dite): level density ∝ f^(1/3), which for
  // this family is the same density with exponent k/3. Lloyd then needs few iterations even
  // at 256 levels.
  std::vector<double> c(m), tau(m + 1);
  {
    const Density companding((g - 3) / 6.0);
    for (int i = 0; i < m; ++i) {
      const double target = 0.5 * (i + 0.5) / m;
      double lo = 0.0, hi = 1.0;
      for (int it = 0; it < 100; ++it) {
        const double mid = 0.5 * (lo + hi);
        (companding.Mass(mid) < target ? lo : hi) = mid;
      }
      c[i] = 0.5 * (lo + hi);
    }
  }
  std::vector<double> mass(m + 1), moment(m + 1);
  int iter = 0;
  for (; iter < kMaxIterations; ++iter) {
    tau[0] = 0.0;
    tau[m] = 1.0;
    for (int i = 1; i < m; ++i) tau[i] = 0.5 * (c[i - 1] + c[i]);
    for (int i = 0; i <= m; ++i) d.Eval(tau[i], &mass[i], &moment[i]);
    double moved = 0.0;
    for (int i = 0; i < m; ++i) {
      const double next = (moment[i + 1] - moment[i]) / (mass[i + 1] - mass[i]);
      moved = std::max(moved, std::fabs(next - c[i]));
      c[i] = next;
    }
    if (moved < (bits == 8 ? kTolerance8 : kTolerance)) break;
  }
  for (int i = 1; i < m; ++i) tau[i] = 0.5 * (c[i - 1] + c[i]);

  // E[t²] = 1/g exactly; at a Lloyd fixed point the distortion is E[t²] − Σ c_i² p_i.
  double explained = 0.0;
  for (int i = 0; i < m; ++i) explained += c[i] * c[i] * (d.Mass(tau[i + 1]) - d.Mass(tau[i]));
  Codebook cb;
  cb.group_size = g;
  cb.bits = bits;
  cb.iterations = iter;
  cb.g_mse = g * (1.0 / g - 2.0 * explained);
  cb.levels_f64.resize(levels);
  for (int i = 0; i < m; ++i) {
    cb.levels_f64[m + i] = c[i];
    cb.levels_f64[m - 1 - i] = -c[i];
  }
  cb.thresholds_f64.resize(levels - 1);
  for (int i = 0; i + 1 < levels; ++i) {
    cb.thresholds_f64[i] = 0.5 * (cb.levels_f64[i] + cb.levels_f64[i + 1]);
  }
  cb.thresholds_f64[m - 1] = 0.0;  // exact by symmetry
  for (double v : cb.levels_f64) cb.levels.push_back(static_cast<float>(v));
  for (double v : cb.thresholds_f64) cb.thresholds.push_back(static_cast<float>(v));
  BuildBuckets(cb);
  return cb;
}

constexpr std::array<int, 6> kGroupSizes = {8, 16, 32, 64, 128, 256};
constexpr std::array<int, 7> kBits = {1, 2, 3, 4, 5, 6, 8};

int GroupIndex(int g) {
  for (size_t i = 0; i < kGroupSizes.size(); ++i) {
    if (kGroupSizes[i] == g) return static_cast<int>(i);
  }
  return -1;
}
int BitsIndex(int b) {
  for (size_t i = 0; i < kBits.size(); ++i) {
    if (kBits[i] == b) return static_cast<int>(i);
  }
  return -1;
}

struct Cache {
  std::mutex mu;
  std::array<std::array<std::unique_ptr<Codebook>, kBits.size()>, kGroupSizes.size()> books;
};

Cache& GetCache() {
  static Cache* cache = new Cache();
  return *cache;
}

}  // namespace

absl::StatusOr<const Codebook*> GetCodebook(int group_size, int bits) {
  const int gi = GroupIndex(group_size);
  if (gi < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group_size ", group_size, " is not supported; expected one of 8, 16, 32, 64, 128, 256"));
  }
  const int bi = BitsIndex(bits);
  if (bi < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bits ", bits, " has no codebook; expected one of 1, 2, 3, 4, 5, 6, 8"));
  }
  Cache& cache = GetCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  auto& slot = cache.books[gi][bi];
  if (!slot) {
    slot = std::make_unique<Codebook>(Compute(group_size, bits));
  }
  return slot.get();
}

}  // namespace turbokv::codec
