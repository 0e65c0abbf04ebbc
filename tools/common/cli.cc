#include "tools/common/cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "merak/core/error.h"
#include "merak/core/parallel.h"

namespace merak::cli {

void fail(const std::string& tool, int code, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", tool.c_str(), message.c_str());
  std::exit(code);
}

void usage_error(const std::string& tool, const std::string& problem) {
  fail(tool, 2, problem + " (" + tool + " --help shows the usage)");
}

std::optional<int64_t> whole_number(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) return std::nullopt;
  return v;
}

std::optional<uint64_t> unsigned_number(const std::string& text) {
  // strtoull takes "-1" as 2^64 - 1.
  if (text.find('-') != std::string::npos) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) return std::nullopt;
  return v;
}

std::optional<double> finite_number(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

int64_t positive(const std::string& tool, const std::string& text, const std::string& what) {
  const std::optional<int64_t> v = whole_number(text);
  if (!v || *v <= 0) usage_error(tool, what + " must be a positive integer, got '" + text + "'");
  return *v;
}

std::string Args::one(const std::string& key, const std::string& fallback) const {
  auto it = options_.find(key);
  if (it == options_.end()) return fallback;
  if (it->second.size() > 1) usage_error(tool_, key + " given more than once");
  return it->second[0];
}

std::vector<std::string> Args::all(const std::string& key) const {
  auto it = options_.find(key);
  return it == options_.end() ? std::vector<std::string>{} : it->second;
}

Args parse(int argc, char** argv, int first, const Spec& spec) {
  Args a(spec.tool);
  auto listed = [](const std::vector<std::string>& list, const std::string& s) {
    return std::find(list.begin(), list.end(), s) != list.end();
  };
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(spec.usage.c_str(), stdout);
      std::exit(0);
    }
    const bool option = arg.size() > 1 && arg[0] == '-';
    if (listed(spec.flags, arg)) {
      a.flags_[arg] = true;
    } else if (listed(spec.with_value, arg)) {
      if (i + 1 >= argc) usage_error(spec.tool, arg + " needs a value");
      a.options_[arg].push_back(argv[++i]);
    } else if (option) {
      usage_error(spec.tool, "unknown option '" + arg + "'");
    } else if (spec.positional) {
      a.positional_.push_back(arg);
    } else {
      usage_error(spec.tool, "unexpected argument '" + arg + "'");
    }
  }
  try {
    threads_from_environment();
  } catch (const Error& e) {
    fail(spec.tool, 2, e.what());
  }
  return a;
}

}  // namespace merak::cli
