#include "tools/command_line.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <iostream>

#include "cornstarch/base/check.h"

extern const char kEmbeddedConfig[];

namespace cornstarch::tools {

void ParseCommandLine(int argc, char** argv, const std::string& usage, const std::vector<Flag>& flags,
                      const std::function<void(const std::string&)>& positional) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << usage;
      std::exit(0);
    }
    if (arg.empty() || arg[0] != '-') {
      if (!positional) throw Error(arg + ": unexpected argument (see --help)");
      positional(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const Flag* flag = nullptr;
    for (const Flag& f : flags) flag = f.name == name ? &f : flag;
    if (!flag) throw Error(arg + ": unknown argument (see --help)");
    if (!flag->takes_value) {
      if (eq != std::string::npos) throw Error(name + ": takes no value");
      flag->apply("");
    } else if (eq != std::string::npos) {
      flag->apply(arg.substr(eq + 1));
    } else {
      if (i + 1 >= argc) throw Error(name + ": expected a value");
      flag->apply(argv[++i]);
    }
  }
}

namespace {

template <class T>
T ParseWhole(const std::string& flag, const std::string& text, const char* expected) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) throw Error(flag + ": expected " + expected + ", got '" + text + "'");
  return value;
}

}  // namespace

int64_t ParseInteger(const std::string& flag, const std::string& text) {
  return ParseWhole<int64_t>(flag, text, "an integer");
}

double ParseNumber(const std::string& flag, const std::string& text) { return ParseWhole<double>(flag, text, "a number"); }

std::string ConfigSource(const std::string& path) { return path.empty() ? "<embedded configs/tiny.yaml>" : path; }

Config LoadToolConfig(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return ParseConfig(kEmbeddedConfig, ConfigSource(path), overrides);
  return LoadConfig(path, overrides);
}

void EnterUserDirectory() {
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY")) {
    if (chdir(dir) != 0) std::cerr << "warning: cannot enter " << dir << "\n";
  }
}

}  // namespace cornstarch::tools
