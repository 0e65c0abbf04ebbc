// merak_export: a checkpoint's full, unsharded weights as one safetensors file, whatever layout
// wrote it, under Merak's parameter names or Hugging Face GPT-2's (so PyTorch users load them
// directly). The optimizer state stays behind.
//
//   merak_export --checkpoint PATH -o model.safetensors [--names merak|hf-gpt2]
//
// PATH: a step directory, or a checkpoint directory (its latest). Exit codes: 0 done, 2 bad
// command line or checkpoint (one line naming the file or tensor) or an output that cannot be
// written (one line naming -o; never a file of the checkpoint itself), 1 any other failure.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
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
// How much of the model is in memory at once (or one tensor, when larger).
constexpr int64_t kBatchBytes = int64_t(1) << 30;
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

// Where the export may go: not over the checkpoint it reads (the output replaces a file whole,
// so `-o` naming a rank's file, even through a link or `..`, would destroy that rank's state),
// and into a directory that exists, found before the checkpoint is read.
void check_output(const std::string& out, const std::string& step_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target = fs::weakly_canonical(fs::absolute(out), ec);
  if (ec) merak::cli::fail(kTool, 2, "-o " + out + ": " + ec.message());
  if (fs::is_directory(target))
    merak::cli::fail(kTool, 2, "-o " + out + ": is a directory, not a file to write");
  if (!fs::is_directory(target.parent_path()))
    merak::cli::fail(kTool, 2, "-o " + out + ": no directory '" +
                                   target.parent_path().string() + "' to write it in");
  const fs::path step = fs::canonical(step_dir, ec);
  if (ec) return;
  auto inside = [&target](const fs::path& dir) {
    return std::mismatch(dir.begin(), dir.end(), target.begin(), target.end()).first == dir.end();
  };
  if (inside(step))
    merak::cli::fail(kTool, 2, "-o " + out + ": is inside the checkpoint's step directory " +
                                   step_dir + " (it would overwrite the checkpoint)");
  // The step's checkpoint directory (the one holding `latest`): its `latest` and its other
  // steps, finished or being written, are the checkpoint too.
  const fs::path dir = step.parent_path();
  if (!fs::exists(dir / "latest")) return;
  const fs::path below = target.lexically_relative(dir);
  const std::string first = below.empty() ? "" : below.begin()->string();
  if (first == "latest" || first.rfind("step_", 0) == 0 || first.rfind(".step_", 0) == 0)
    merak::cli::fail(kTool, 2, "-o " + out + ": is " + (first == "latest" ? "" : "inside ") +
                                   (dir / first).string() + " of the checkpoint directory " +
                                   dir.string() + " (it would overwrite the checkpoint)");
}

// The output's temporary file while it is written: it grows to the model's size, and an
// interrupted export (Ctrl-C, a job's SIGTERM) removes it before dying of the signal.
char g_partial[4096] = "";

extern "C" void remove_partial(int sig) {
  if (g_partial[0] != '\0') ::unlink(g_partial);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace merak;
  // A file grown past the process's size limit (ulimit -f) fails its write with EFBIG, reported
  // like a full disk, instead of the signal killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  const cli::Args args =
      cli::parse(argc, argv, 1, {kTool, kUsage, {"--checkpoint", "-o", "--names"}, {}, false});
  const std::string path = args.one("--checkpoint"), out = args.one("-o");
  const std::string names = args.one("--names", "merak");
  if (path.empty() || out.empty()) cli::usage_error(kTool, "--checkpoint and -o are required");
  if (names != "merak" && names != "hf-gpt2")
    cli::usage_error(kTool, "--names must be merak or hf-gpt2, got '" + names + "'");
  try {
    const std::string step_dir = checkpoint::resolve(path);
    check_output(out, step_dir);
    const checkpoint::Index index = checkpoint::read_index(step_dir);
    const config::Config cfg = config::parse(index.config, step_dir + "/index.json");
    if (names == "hf-gpt2" && cfg.model.family != "gpt")
      cli::fail(kTool, 2, "--names hf-gpt2 is for GPT models; " + step_dir + " holds a " +
                              cfg.model.family);
    // GPT-2's names are mapped from the network Merak builds; an imported one has its own.
    if (names == "hf-gpt2" && !cfg.model.onnx.empty())
      cli::fail(kTool, 2, "--names hf-gpt2 is for the GPT Merak builds; " + step_dir +
                              " holds the network imported from " + cfg.model.onnx +
                              " (--names merak writes its parameters under its own names)");
    // The header first, from the index; then the parameters in batches of about kBatchBytes
    // (read together, so the reader can plan their files' reads), each written and freed
    // before the next batch is read: a 20B model's 80 GB of f32 need never be in memory.
    std::vector<checkpoint::RegionRead> reads;
    std::vector<checkpoint::SafetensorsWriter::Spec> specs;
    std::vector<bool> transpose;
    int64_t elements = 0, total_bytes = 0;
    for (const auto& [name, entry] : index.tensors) {
      if (is_optimizer_state(name)) continue;
      reads.push_back({name, entry.shape, entry.dtype, checkpoint::whole(entry.shape), Tensor()});
      elements += merak::numel(entry.shape);
      total_bytes += merak::numel(entry.shape) * int64_t(dtype_size(entry.dtype));
      if (names == "merak") {
        specs.push_back({name, entry.dtype, entry.shape});
        transpose.push_back(false);
        continue;
      }
      const models::ExternalName hf = models::hf_gpt2_name(name);
      if (hf.name.empty())
        cli::fail(kTool, 2, step_dir + ": parameter '" + name + "' has no GPT-2 name");
      Shape shape = entry.shape;
      if (hf.transpose) std::swap(shape[0], shape[1]);  // Conv1D's [in, out]
      specs.push_back({hf.name, entry.dtype, shape});
      transpose.push_back(hf.transpose);
    }
    std::optional<checkpoint::SafetensorsWriter> file;
    auto output_error = [&](const Error& e) {  // a full disk, a directory not writable
      cli::fail(kTool, 2, "-o " + out + ": " + e.what());
    };
    try {
      file.emplace(out, specs, std::map<std::string, std::string>{{"format", "pt"}});
    } catch (const Error& e) {
      output_error(e);
    }
    if (file->temporary_path().size() < sizeof g_partial) {
      std::strcpy(g_partial, file->temporary_path().c_str());
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, remove_partial);
    }
    const auto start = std::chrono::steady_clock::now();
    auto shown = start;
    int64_t done_bytes = 0;
    for (size_t begin = 0; begin < reads.size();) {
      size_t end = begin;
      int64_t batch_bytes = 0;
      while (end < reads.size() && (end == begin || batch_bytes < kBatchBytes)) {
        reads[end].out = Tensor::empty(reads[end].global_shape, reads[end].dtype);
        batch_bytes += reads[end].out.nbytes();
        ++end;
      }
      checkpoint::read_regions(  // the copies share `out`'s storage
          index, std::vector<checkpoint::RegionRead>(reads.begin() + begin, reads.begin() + end));
      for (size_t i = begin; i < end; ++i) {
        const Tensor t = transpose[i] ? reads[i].out.transpose(0, 1).contiguous() : reads[i].out;
        try {
          file->write(t);
        } catch (const Error& e) {
          output_error(e);
        }
        reads[i].out = Tensor();  // freed before the next batch is read
      }
      done_bytes += batch_bytes;
      begin = end;
      const auto now = std::chrono::steady_clock::now();
      if (now - shown > std::chrono::seconds(5) && begin < reads.size()) {
        shown = now;
        std::fprintf(stderr, "merak_export: %.1f of %.1f GB (%.0f s)\n", double(done_bytes) / 1e9,
                     double(total_bytes) / 1e9,
                     std::chrono::duration<double>(now - start).count());
      }
    }
    try {
      file->commit();
    } catch (const Error& e) {
      output_error(e);
    }
    g_partial[0] = '\0';
    std::printf("merak_export: %zu tensors (%.2fM parameters) of step %lld from %s to %s (%s "
                "names)\n",
                specs.size(), double(elements) / 1e6, static_cast<long long>(index.step),
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
