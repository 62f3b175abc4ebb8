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

// The baseline: layer counts as equal as possible (earlier stages take the remainder), whatever they cost.
Partition UniformPartition(const std::vector<double>& costs, int num_stages);

// The bottleneck of a given partition.
double Bottleneck(const std::vector<double>& costs, const std::vector<int>& boundaries);

}  // namespace cornstarch
