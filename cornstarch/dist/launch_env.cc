#include "cornstarch/dist/launch_env.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

struct Source {
  const char* rank;
  const char* local_rank;
  const char* world;
  const char* local_world;
};

int ParseInt(const GetEnvFn& getenv, const char* name, int fallback) {
  const char* value = getenv(name);
  if (value == nullptr) {
    if (fallback >= 0) return fallback;
    throw Error(std::string(name) + ": not set, but the launcher set the other rank variables");
  }
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || parsed < 0) {
    throw Error(std::string(name) + ": expected a non-negative integer, got '" + value + "'");
  }
  return static_cast<int>(parsed);
}

}  // namespace

LaunchEnv DetectLaunchEnv(const GetEnvFn& getenv) {
  static const Source kSources[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"},
      {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"},
  };
  for (const Source& s : kSources) {
    if (getenv(s.rank) == nullptr && getenv(s.world) == nullptr) continue;
    LaunchEnv env;
    env.rank = ParseInt(getenv, s.rank, -1);
    env.world_size = ParseInt(getenv, s.world, -1);
    env.local_rank = ParseInt(getenv, s.local_rank, 0);
    env.local_world_size = std::max(1, ParseInt(getenv, s.local_world, 1));
    env.source = std::string(s.rank) + "/" + s.world;
    if (env.world_size < 1) throw Error(std::string(s.world) + ": must be at least 1, got 0");
    if (env.rank >= env.world_size) {
      throw Error(std::string(s.rank) + ": must be below " + s.world + "=" + std::to_string(env.world_size) +
                  ", got " + std::to_string(env.rank));
    }
    return env;
  }
  return LaunchEnv{};
}

LaunchEnv DetectLaunchEnv() {
  return DetectLaunchEnv([](const char* name) { return std::getenv(name); });
}

}  // namespace cornstarch
