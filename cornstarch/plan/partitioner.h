// Contiguous partition of a chain of layers into pipeline stages. Pure.
#pragma once

#include <vector>

namespace cornstarch {

struct Partition {
  std::vector<int> boundaries;  // num_stages + 1 layer indices: stage s owns [boundaries[s], boundaries[s + 1])
  double bottleneck = 0;        // the largest per-stage cost
};

// The exact minimum-bottleneck partition of `costs` (each layer's F + B) into `num_stages` non-empty stages, by
// dynamic programming (paper section 4.1): X[i][k] = min over j of max(X[j][k - 1], w(j, i)), O(K N^2).
// REQUIRES: 1 <= num_stages <= costs.size().
Partition MinBottleneckPartition(const std::vector<double>& costs, int num_stages);

// Among the partitions whose bottleneck is at most `bound`, the one whose stages, from the first, each take as
// many layers as fit: with the optimal bound, an optimal partition that leaves the slack to the last stages.
// (Optimal partitions are rarely unique, and 1F1B is not indifferent to where the slack goes.)
// REQUIRES: 1 <= num_stages <= costs.size() and a feasible bound (e.g. MinBottleneckPartition's bottleneck).
Partition FrontLoadedPartition(const std::vector<double>& costs, int num_stages, double bound);

// The baseline: layer counts as equal as possible (earlier stages take the remainder), whatever they cost.
Partition UniformPartition(const std::vector<double>& costs, int num_stages);

// The bottleneck of a given partition.
double Bottleneck(const std::vector<double>& costs, const std::vector<int>& boundaries);

}  // namespace cornstarch
