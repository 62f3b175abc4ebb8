// Counter-based seeding: every random stream is derived from (seed, purpose, index), so a sample or a layer's
// init is the same whichever rank produces it and in whatever order.
#pragma once

#include <cstdint>

namespace cornstarch {

// splitmix64 finaliser: a well-mixed 64-bit value from two inputs.
inline uint64_t MixSeed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace cornstarch
