#include "cornstarch/plan/partitioner.h"

#include <algorithm>
#include <limits>

#include "cornstarch/base/check.h"

namespace cornstarch {

double Bottleneck(const std::vector<double>& costs, const std::vector<int>& boundaries) {
  double worst = 0;
  for (size_t s = 0; s + 1 < boundaries.size(); ++s) {
    double sum = 0;
    for (int l = boundaries[s]; l < boundaries[s + 1]; ++l) sum += costs[l];
    worst = std::max(worst, sum);
  }
  return worst;
}

Partition MinBottleneckPartition(const std::vector<double>& costs, int num_stages) {
  const int n = static_cast<int>(costs.size());
  CS_CHECK(num_stages >= 1 && num_stages <= n, num_stages, " stages for ", n, " layers");
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[k][i]: least bottleneck of the first i layers in k + 1 stages; from[k][i]: where the last stage starts.
  std::vector<std::vector<double>> best(num_stages, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> from(num_stages, std::vector<int>(n + 1, 0));
  for (int i = 1; i <= n; ++i) best[0][i] = prefix[i];
  for (int k = 1; k < num_stages; ++k) {
    for (int i = k + 1; i <= n; ++i) {
      for (int j = k; j < i; ++j) {
        const double candidate = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (candidate < best[k][i]) best[k][i] = candidate, from[k][i] = j;
      }
    }
  }
  Partition p;
  p.boundaries.assign(num_stages + 1, n);
  p.boundaries[0] = 0;
  for (int k = num_stages - 1, i = n; k >= 1; --k) {
    i = from[k][i];
    p.boundaries[k] = i;
  }
  p.bottleneck = best[num_stages - 1][n];
  return p;
}

Partition FrontLoadedPartition(const std::vector<double>& costs, int num_stages, double bound) {
  const int n = static_cast<int>(costs.size());
  CS_CHECK(num_stages >= 1 && num_stages <= n, num_stages, " stages for ", n, " layers");
  const double limit = bound * (1 + 1e-12);  // the bound is a sum of the same costs, maybe in another order
  Partition p;
  p.boundaries.push_back(0);
  for (int s = 0, i = 0; s < num_stages; ++s) {
    const int keep = num_stages - s - 1;  // later stages need a layer each
    double sum = costs[i++];
    if (s == num_stages - 1) {
      while (i < n) sum += costs[i++];
    } else {
      while (i < n - keep && sum + costs[i] <= limit) sum += costs[i++];
    }
    CS_CHECK(sum <= limit, "bound ", bound, " is infeasible for ", num_stages, " stages");
    p.boundaries.push_back(i);
  }
  p.bottleneck = Bottleneck(costs, p.boundaries);
  return p;
}

Partition UniformPartition(const std::vector<double>& costs, int num_stages) {
  const int n = static_cast<int>(costs.size());
  CS_CHECK(num_stages >= 1 && num_stages <= n, num_stages, " stages for ", n, " layers");
  Partition p;
  p.boundaries.push_back(0);
  for (int s = 0; s < num_stages; ++s) p.boundaries.push_back(p.boundaries.back() + n / num_stages + (s < n % num_stages));
  p.bottleneck = Bottleneck(costs, p.boundaries);
  return p;
}

}  // namespace cornstarch
