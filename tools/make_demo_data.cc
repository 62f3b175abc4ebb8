// make-demo-data DIR [--samples N] [--seed S] [--json]: writes a small LLaVA-style dataset with images, audio and
// a trained tokenizer to DIR (see include/cornstarch/data/demo_dataset.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cornstarch/data/demo_dataset.h"
#include "cornstarch/util/check.h"

int main(int argc, char** argv) {
  // Under `bazel run`, DIR is relative to where the user is, not to the runfiles tree.
  if (const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY")) {
    if (chdir(cwd) != 0) std::fprintf(stderr, "make-demo-data: cannot enter %s\n", cwd);
  }
  cornstarch::DemoDataOptions options;
  std::string dir;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw cornstarch::Error(a + ": expected a value");
        return argv[++i];
      };
      if (a == "--samples") options.samples = std::stoll(value());
      else if (a == "--seed") options.seed = std::stoull(value());
      else if (a == "--json") options.jsonl = false;
      else if (!a.empty() && a[0] != '-' && dir.empty()) dir = a;
      else throw cornstarch::Error("unknown argument '" + a + "'; usage: make-demo-data DIR [--samples N] [--seed S] [--json]");
    }
    if (dir.empty()) throw cornstarch::Error("usage: make-demo-data DIR [--samples N] [--seed S] [--json]");
    if (options.samples < 1) throw cornstarch::Error("--samples: expected at least 1");
    cornstarch::WriteDemoDataset(dir, options);
    std::printf("wrote %lld samples, media and tokenizer.model to %s\n", static_cast<long long>(options.samples),
                dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make-demo-data: %s\n", e.what());
    return 1;
  }
  return 0;
}
