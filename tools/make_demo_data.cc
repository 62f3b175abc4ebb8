// make-demo-data DIR [--samples N] [--seed S] [--json]: writes a small LLaVA-style dataset with images, audio and
// a trained tokenizer to DIR (see cornstarch/data/demo_dataset.h).

#include <cstdio>
#include <string>

#include "cornstarch/data/demo_dataset.h"
#include "cornstarch/base/check.h"
#include "tools/command_line.h"

int main(int argc, char** argv) {
  cornstarch::tools::EnterUserDirectory();  // under `bazel run`, DIR is relative to where the user is
  cornstarch::DemoDataOptions options;
  std::string dir;
  try {
    const std::string usage = "usage: make-demo-data DIR [--samples N] [--seed S] [--json]";
    cornstarch::tools::ParseCommandLine(
        argc, argv, usage + "\n",
        {{"--samples", true, [&](const std::string& v) { options.samples = cornstarch::tools::ParseInteger("--samples", v); }},
         {"--seed", true,
          [&](const std::string& v) { options.seed = static_cast<uint64_t>(cornstarch::tools::ParseInteger("--seed", v)); }},
         {"--json", false, [&](const std::string&) { options.jsonl = false; }}},
        [&](const std::string& arg) {
          if (!dir.empty()) throw cornstarch::Error(arg + ": only one DIR; " + usage);
          dir = arg;
        });
    if (dir.empty()) throw cornstarch::Error(usage);
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
