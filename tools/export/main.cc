// merak_export: a checkpoint's full, unsharded weights as one safetensors file, whatever layout
// wrote it, under Merak's parameter names or Hugging Face GPT-2's (so PyTorch users load them
// directly). The optimizer state stays behind.
//
//   merak_export --checkpoint PATH -o model.safetensors [--names merak|hf-gpt2]
//
// PATH: a step directory, or a checkpoint directory (its latest). Exit codes: 0 done, 2 bad
// command line or checkpoint (one line naming the file or tensor), 1 any other failure.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "merak/checkpoint/safetensors.h"
#include "merak/checkpoint/reader.h"
#include "merak/checkpoint/store.h"
#include "merak/config/config.h"
#include "models/gpt.h"
#include "tools/common/cli.h"

namespace {

const char* kTool = "merak_export";
const char* kUsage =
    "usage: merak_export --checkpoint PATH -o FILE.safetensors [--names merak|hf-gpt2]\n";

bool is_optimizer_state(const std::string& name) {
  for (const char* suffix : {".exp_avg", ".exp_avg_sq"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace merak;
  const cli::Args args =
      cli::parse(argc, argv, 1, {kTool, kUsage, {"--checkpoint", "-o", "--names"}, {}, false});
  const std::string path = args.one("--checkpoint"), out = args.one("-o");
  const std::string names = args.one("--names", "merak");
  if (path.empty() || out.empty()) cli::usage_error(kTool, "--checkpoint and -o are required");
  if (names != "merak" && names != "hf-gpt2")
    cli::usage_error(kTool, "--names must be merak or hf-gpt2, got '" + names + "'");
  try {
    const std::string step_dir = checkpoint::resolve(path);
    const checkpoint::Index index = checkpoint::read_index(step_dir);
    const config::Config cfg = config::parse(index.config, step_dir + "/index.json");
    if (names == "hf-gpt2" && cfg.model.family != "gpt")
      cli::fail(kTool, 2, "--names hf-gpt2 is for GPT models; " + step_dir + " holds a " +
                              cfg.model.family);
    // Every parameter whole, read in one go (the reader plans the files' reads together).
    std::vector<checkpoint::RegionRead> reads;
    for (const auto& [name, entry] : index.tensors)
      if (!is_optimizer_state(name))
        reads.push_back({name, entry.shape, entry.dtype, checkpoint::whole(entry.shape),
                         Tensor::empty(entry.shape, entry.dtype)});
    checkpoint::read_regions(index, reads);
    std::vector<std::pair<std::string, Tensor>> tensors;
    int64_t elements = 0;
    for (const checkpoint::RegionRead& r : reads) {
      elements += r.out.numel();
      if (names == "merak") {
        tensors.emplace_back(r.tensor, r.out);
        continue;
      }
      const models::ExternalName hf = models::hf_gpt2_name(r.tensor);
      if (hf.name.empty())
        cli::fail(kTool, 2, step_dir + ": parameter '" + r.tensor + "' has no GPT-2 name");
      tensors.emplace_back(hf.name, hf.transpose ? r.out.transpose(0, 1).contiguous() : r.out);
    }
    checkpoint::save_safetensors(out, tensors, {{"format", "pt"}});
    std::printf("merak_export: %zu tensors (%.2fM parameters) of step %lld from %s to %s (%s "
                "names)\n",
                tensors.size(), double(elements) / 1e6, static_cast<long long>(index.step),
                step_dir.c_str(), out.c_str(), names.c_str());
    return 0;
  } catch (const checkpoint::CheckpointError& e) {
    std::fprintf(stderr, "merak_export: %s\n", e.what());
    return 2;
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "merak_export: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "merak_export: error: %s\n", e.what());
    return 1;
  }
}
