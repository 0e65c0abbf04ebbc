// The command-line conventions of Merak's tools: options with values (repeatable), flags, and
// positional arguments; --help prints the usage; any problem is one line on stderr naming the
// tool, and exit code 2. MERAK_NUM_THREADS is checked with the arguments (a value that is not a
// thread count is a problem of the command line's, not a failure at the pool's first use).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace merak::cli {

struct Spec {
  std::string tool;                     // "merak_graph", for messages
  std::string usage;                    // printed by --help
  std::vector<std::string> with_value;  // options that take a value ("-o", "--config")
  std::vector<std::string> flags;       // options without a value ("--explain")
  bool positional = false;              // whether bare arguments are accepted
};

class Args {
 public:
  explicit Args(std::string tool) : tool_(std::move(tool)) {}
  // The value of an option given at most once (fallback when absent).
  std::string one(const std::string& key, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& key) const;  // every value, in order
  bool flag(const std::string& key) const { return flags_.count(key) > 0; }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  friend Args parse(int argc, char** argv, int first, const Spec& spec);
  std::string tool_;
  std::map<std::string, std::vector<std::string>> options_;
  std::map<std::string, bool> flags_;
  std::vector<std::string> positional_;
};

Args parse(int argc, char** argv, int first, const Spec& spec);

// "TOOL: message" on stderr, then exit(code).
[[noreturn]] void fail(const std::string& tool, int code, const std::string& message);
// A command-line problem: "TOOL: problem (TOOL --help shows the usage)", exit 2.
[[noreturn]] void usage_error(const std::string& tool, const std::string& problem);
// Numbers as flags take them: the whole text, or nullopt when it is empty, has anything after
// the number, or lies beyond the type (where strtoll and friends would clamp).
std::optional<int64_t> whole_number(const std::string& text);
std::optional<uint64_t> unsigned_number(const std::string& text);  // no sign allowed
std::optional<double> finite_number(const std::string& text);      // not inf or nan

// A positive integer, or a usage error naming `what`.
int64_t positive(const std::string& tool, const std::string& text, const std::string& what);

}  // namespace merak::cli
