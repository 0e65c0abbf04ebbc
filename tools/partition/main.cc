// merak_partition: splits a model over a (dp, pp, tp) layout and shows what each stage holds.
// With --config it plans exactly what merak_train would run (the same partition request); its
// flags stand for config keys (--pp: parallel.pp, --hardware: parallel.hardware, --precision:
// train.precision, --recompute: parallel.recompute=full, ...), defaulting to the config's.
//
//   merak_partition --config FILE.yaml [--pp N --tp N --dp N --hardware NAME]
//                   [--micro-batches M] [--schedule 1f1b|gpipe|shifted|zb] [--zero1] [--recompute]
//                   [--precision f32|bf16|f16] [--memory-gib G] [--set key=value ...]
//                   [--explain] [--json] [-o plan.pb]
//   merak_partition --onnx FILE.onnx --hardware NAME [--dim batch=2 --dim seq=64]
//                   [--input NAME=2x64] [--precision f32|tf32|bf16|f16] ... (the same)
//   merak_partition calibrate [-o configs/hardware/cpu-local.yaml]
//
// Exit codes: 0 done, 2 bad command line, config, profile or graph, or no split fits (one line
// saying what), 1 any other failure.
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "merak/config/config.h"
#include "merak/graph/onnx_import.h"
#include "merak/graph/tracer.h"
#include "merak/partition/partitioner.h"
#include "merak/partition/plan_builder.h"
#include "merak/partition/report.h"
#include "merak/train/plan.h"
#include "tools/common/cli.h"
#include "tools/common/import_args.h"
#include "tools/partition/calibrate.h"

namespace {

using namespace merak;

const char* kUsage =
    "usage: merak_partition (--config FILE.yaml | --onnx FILE.onnx) [--pp N --tp N --dp N]\n"
    "                       [--hardware NAME] [--micro-batches M]\n"
    "                       [--schedule 1f1b|gpipe|shifted|zb]\n"
    "                       [--zero1] [--recompute] [--precision f32|tf32|bf16|f16]\n"
    "                       [--memory-gib G] [--set key=value ...] (config: flags stand for\n"
    "                       its keys and default to its values; tf32: onnx only)\n"
    "                       [--dim SYMBOL=N ...] [--input NAME=2x64 ...] (onnx)\n"
    "                       [--explain] [--json] [-o plan.pb]\n"
    "       merak_partition calibrate [-o configs/hardware/cpu-local.yaml]\n"
    "Without --json or -o, --explain is implied.\n";

using cli::Args;

[[noreturn]] void fail(int code, const std::string& message) {
  cli::fail("merak_partition", code, message);
}
[[noreturn]] void usage(const std::string& problem) {
  cli::usage_error("merak_partition", problem);
}

Args parse(int argc, char** argv, int first, const std::vector<std::string>& with_value,
           const std::vector<std::string>& flags) {
  return cli::parse(argc, argv, first, {"merak_partition", kUsage, with_value, flags, false});
}

int64_t positive(const std::string& text, const std::string& what) {
  return cli::positive("merak_partition", text, what);
}

double positive_number(const std::string& text, const std::string& what) {
  const std::optional<double> v = cli::finite_number(text);
  if (!v || *v <= 0) usage(what + " must be a finite positive number, got '" + text + "'");
  return *v;
}

// merak_partition's flags as the config keys they stand for (applied after the --set
// overrides, and named in messages as given): with the config's other keys they make the
// request merak_train would run with.
config::FlagOverrides flag_overrides(const Args& a) {
  config::FlagOverrides sets;
  const std::pair<const char*, const char*> keys[] = {
      {"--dp", "parallel.dp"},           {"--pp", "parallel.pp"},
      {"--tp", "parallel.tp"},           {"--hardware", "parallel.hardware"},
      {"--schedule", "parallel.schedule"}, {"--micro-batches", "parallel.micro_batches"},
      {"--precision", "train.precision"}};
  for (const auto& [flag, key] : keys) {
    if (a.one(flag).empty()) continue;
    const std::string f = flag;
    if (f == "--dp" || f == "--pp" || f == "--tp" || f == "--micro-batches") positive(a.one(f), f);
    sets.emplace_back(f, std::string(key) + "=" + a.one(flag));
  }
  if (a.flag("--zero1")) sets.emplace_back("--zero1", "parallel.zero1=true");
  if (a.flag("--recompute")) sets.emplace_back("--recompute", "parallel.recompute=full");
  return sets;
}

// Keys the config leaves to the layout search hold placeholders here (one layout is planned,
// none searched): say which and what was assumed, so the plan is not taken for merak_train's.
void warn_auto_keys(const config::Config& c) {
  if (c.parallel.auto_keys.empty()) return;
  const config::ParallelConfig& p = c.parallel;
  const std::map<std::string, std::string> value = {
      {"parallel.dp", std::to_string(p.dp)},
      {"parallel.pp", std::to_string(p.pp)},
      {"parallel.tp", std::to_string(p.tp)},
      {"train.micro_batch", std::to_string(config::micro_batch_size(c))},
      {"parallel.schedule", p.schedule},
      {"parallel.virtual_stages", std::to_string(p.virtual_stages)},
      {"parallel.recompute", p.recompute},
      {"parallel.zero1", p.zero1 ? "true" : "false"}};
  std::string keys;
  for (const std::string& k : p.auto_keys)
    keys += (keys.empty() ? "" : ", ") + k + " " + (value.count(k) ? value.at(k) : "?");
  std::fprintf(stderr,
               "merak_partition: note: %s leaves keys to auto, planned here as %s (merak_partition "
               "plans one layout; merak_train --dry-run --world N searches them)\n",
               c.path.c_str(), keys.c_str());
}

// The plan's times are the profile's: a CPU's profile calibrated on a CPU of another speed
// predicts them off by the ratio (merak_train warns alike).
void warn_cpu_profile(const std::string& hw_name) {
  const std::string warning = partition::cpu_profile_warning(hw_name);
  if (!warning.empty()) std::fprintf(stderr, "merak_partition: warning: %s\n", warning.c_str());
}

// The request merak_train builds for the config (train::partition_input), so the plan explained
// is the plan that runs.
train::PartitionInput from_config(const Args& a, config::Config* cfg) {
  try {
    *cfg = config::load(a.one("--config"), a.all("--set"), flag_overrides(a));
    return train::partition_input(*cfg);
  } catch (const config::ConfigError& e) {
    fail(2, e.what());
  } catch (const train::SetupError& e) {
    fail(2, e.what());
  }
}

graph::Model from_onnx(const Args& a) {
  const graph::ImportOptions options = cli::import_options("merak_partition", a);
  try {
    return graph::import_onnx(a.one("--onnx"), options);
  } catch (const graph::ImportError& e) {
    fail(2, e.what());
  }
}

// A graph imported from ONNX, partitioned as the flags say.
partition::Request onnx_request(const Args& a) {
  partition::Request req;
  req.dp = positive(a.one("--dp", "1"), "--dp");
  req.pp = positive(a.one("--pp", "1"), "--pp");
  req.tp = positive(a.one("--tp", "1"), "--tp");
  const std::string hw_name = a.one("--hardware");
  if (hw_name.empty()) usage("--hardware NAME is required with --onnx (a100-80g, h100-80g, h200, cpu-local)");
  try {
    req.hardware = partition::load_hardware(partition::find_hardware(hw_name));
  } catch (const partition::HardwareError& e) {
    fail(2, e.what());
  }
  req.memory.precision = req.hardware.precision;
  if (!a.one("--precision").empty()) {
    try {
      req.memory.precision = partition::parse_precision(a.one("--precision"));
    } catch (const std::invalid_argument& e) {
      usage(std::string("--precision: ") + e.what());
    }
    if (req.hardware.peak(req.memory.precision) <= 0)
      fail(2, "hardware '" + hw_name + "' has no " + a.one("--precision") + " peak");
  }
  try {
    req.memory.schedule = partition::parse_schedule(a.one("--schedule", "1f1b"));
  } catch (const std::invalid_argument& e) {
    usage(std::string("--schedule: ") + e.what());
  }
  req.memory.zero1 = a.flag("--zero1");
  req.memory.recompute =
      a.flag("--recompute") ? partition::Recompute::Full : partition::Recompute::None;
  if (!a.one("--micro-batches").empty())
    req.memory.micro_batches = positive(a.one("--micro-batches"), "--micro-batches");
  return req;
}

int cmd_partition(const Args& a) {
  const bool has_config = !a.one("--config").empty(), has_onnx = !a.one("--onnx").empty();
  if (has_config == has_onnx) usage("give one of --config FILE.yaml or --onnx FILE.onnx");
  if (has_config && (!a.all("--dim").empty() || !a.all("--input").empty()))
    usage("--dim and --input go with --onnx");
  if (has_onnx && !a.all("--set").empty()) usage("--set goes with --config");

  train::PartitionInput in;
  config::Config cfg;
  if (has_config) {
    in = from_config(a, &cfg);
  } else {
    in.request = onnx_request(a);
    in.model = from_onnx(a);
  }
  partition::Request& req = in.request;
  if (!a.one("--memory-gib").empty())
    req.memory_limit = positive_number(a.one("--memory-gib"), "--memory-gib") * 1024.0 * 1024 * 1024;

  partition::Result result;
  if (has_config) {
    try {
      result = train::partition_config(cfg, in);
    } catch (const train::SetupError& e) {
      fail(2, e.what());
    }
  } else {
    try {
      result = partition::run_partition(in.model, req);
    } catch (const partition::NoFit& e) {
      fail(2, std::string(e.what()) + "; the best split needs " +
                  partition::memory_text(e.needed) +
                  " per device (try more stages, tp, --zero1 or --recompute)");
    } catch (const Error& e) {
      fail(2, "cannot partition " + a.one("--onnx") + ": " + e.what());
    }
  }
  if (has_config) warn_auto_keys(cfg);  // after any error, which stays one line
  const std::string hw_name = has_config ? cfg.parallel.hardware : a.one("--hardware");
  warn_cpu_profile(hw_name);
  const partition::ReportHeader header{has_config ? cfg.path : a.one("--onnx"), hw_name};
  const std::string out = a.one("-o");
  if (!out.empty()) {
    errno = 0;
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    const std::string bytes = partition::plan_bytes(result.plan);
    if (!f || !f.write(bytes.data(), std::streamsize(bytes.size())) || !f.flush())
      fail(2, "cannot write '" + out + "'" +
                  (errno ? std::string(" (") + std::strerror(errno) + ")" : ""));
  }
  const bool json = a.flag("--json");
  if (json) std::fputs(partition::to_json(result, req, header).c_str(), stdout);
  if (a.flag("--explain") || (!json && out.empty()))
    std::fputs(partition::explain(result, req, header).c_str(), stdout);
  if (!out.empty() && !json)
    std::printf("wrote %s (%d rank programs)\n", out.c_str(), result.plan.ranks_size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::string(argv[1]) == "calibrate") {
      const Args a = parse(argc, argv, 2, {"-o"}, {});
      return merak::tools::calibrate(argc, argv, a.one("-o", "configs/hardware/cpu-local.yaml"));
    }
    const Args a = parse(argc, argv, 1,
                         {"--config", "--onnx", "--pp", "--tp", "--dp", "--hardware",
                          "--micro-batches", "--schedule", "--precision", "--memory-gib", "--set",
                          "--dim", "--input", "-o"},
                         {"--zero1", "--recompute", "--explain", "--json"});
    return cmd_partition(a);
  } catch (const std::exception& e) {
    fail(1, e.what());
  }
}
