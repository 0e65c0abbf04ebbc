// libFuzzer target for run configurations: the input is YAML text and up to four `--set`
// overrides ("key=value"), joined by fuzz_files.h's separator. Whatever the bytes, parse returns
// a validated config or throws ConfigError. A config it returns must survive what the trainer
// does with it: the batch arithmetic, and to_yaml parsed back to the same YAML. Anything else (a
// crash, a sanitizer report, another exception, a leak) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "merak/config/config.h"
#include "tools/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = merak::fuzz::split_input(data, size, 5);
  const std::string yaml(parts[0]);
  std::vector<std::string> overrides;
  for (size_t i = 1; i < parts.size(); ++i) overrides.emplace_back(parts[i]);
  merak::config::Config config;
  try {
    config = merak::config::parse(yaml, "fuzz.yaml", overrides);
  } catch (const merak::config::ConfigError&) {
    return 0;
  }
  (void)merak::config::model_micro_batch_size(config);
  (void)merak::config::model_micro_batches_per_replica(config);
  const std::string written = merak::config::to_yaml(config);
  std::string again;
  try {
    again = merak::config::to_yaml(merak::config::parse(written, "to_yaml", {}));
  } catch (const merak::config::ConfigError& e) {
    std::fprintf(stderr, "to_yaml wrote a config parse rejects: %s\n---\n%s", e.what(),
                 written.c_str());
    std::abort();
  }
  if (again != written) {
    std::fprintf(stderr, "to_yaml does not round-trip:\n%s---\n%s", written.c_str(), again.c_str());
    std::abort();
  }
  return 0;
}
