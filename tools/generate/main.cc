// merak_generate: text sampled from a trained GPT checkpoint, one process, with a key/value
// cache (models/gpt_decode.h), streamed to stdout as it is sampled.
//
//   merak_generate --checkpoint PATH --prompt TEXT [--max-tokens N] [--temperature T]
//                  [--top-k K] [--seed S] [--device cpu|cuda] [--vocab FILE --merges FILE]
//
// PATH: a step directory, or a checkpoint directory (its latest). The model and the tokenizer
// are the checkpoint's config's (data.tokenizer byte, or gpt2 with data.vocab / data.merges
// relative to the current directory, or the files --vocab / --merges name). stdout gets the
// prompt and then the sampled text; stderr one line of statistics. Exit codes: 0 done, 2 bad
// command line, checkpoint or tokenizer file (one line naming it), 1 any other failure.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "merak/checkpoint/reader.h"
#include "merak/checkpoint/store.h"
#include "merak/config/config.h"
#include "merak/cuda/runtime.h"
#include "merak/data/dataset.h"
#include "merak/data/gpt2_tokenizer.h"
#include "models/gpt_decode.h"
#include "models/sampling.h"
#include "tools/common/cli.h"

namespace {

const char* kTool = "merak_generate";
const char* kUsage =
    "usage: merak_generate --checkpoint PATH --prompt TEXT [--max-tokens N] [--temperature T]\n"
    "                      [--top-k K] [--seed S] [--device cpu|cuda]\n"
    "                      [--vocab FILE --merges FILE]\n"
    "  --max-tokens N   tokens to sample (default 100); sampling also stops when the context\n"
    "                   reaches model.max_seq, or at <|endoftext|> (gpt2 tokenizer)\n"
    "  --temperature T  softmax temperature (default 1); 0 = greedy\n"
    "  --top-k K        sample among the K most likely tokens (default 0 = all)\n"
    "  --seed S         sampling seed (default 1): the same seed gives the same text\n"
    "  --vocab, --merges  GPT-2's tokenizer files, in place of the checkpoint config's\n"
    "                   data.vocab and data.merges (paths relative to where it trained)\n"
    "  An empty prompt starts from <|endoftext|> (gpt2) or a newline (byte).\n";

using merak::cli::usage_error;

double number(const std::string& text, const std::string& what) {
  const std::optional<double> v = merak::cli::finite_number(text);
  if (!v || *v < 0) usage_error(kTool, what + " must be a finite number >= 0, got '" + text + "'");
  return *v;
}

uint64_t count(const std::string& text, const std::string& what) {
  const std::optional<uint64_t> v = merak::cli::unsigned_number(text);
  if (!v) usage_error(kTool, what + " must be an integer >= 0, got '" + text + "'");
  return *v;
}

// The checkpoint config's tokenizer: bytes, or GPT-2's BPE from data.vocab and data.merges.
struct Tokenizer {
  std::optional<merak::data::Gpt2Tokenizer> gpt2;
  int64_t vocab() const { return gpt2 ? gpt2->vocab_size() : 256; }
  std::vector<int64_t> encode(const std::string& text) {
    return gpt2 ? gpt2->encode(text, /*allow_special=*/true) : merak::data::tokenize_bytes(text);
  }
  std::string decode(int64_t id) const {
    return gpt2 ? gpt2->decode({id}) : merak::data::detokenize_bytes({id});
  }
  // What an empty prompt starts from (it is not printed).
  int64_t start() const { return gpt2 ? gpt2->eot_id() : int64_t('\n'); }
};

Tokenizer make_tokenizer(const merak::config::DataConfig& data, const std::string& step_dir) {
  Tokenizer t;
  if (data.tokenizer == "byte") return t;
  if (data.tokenizer != "gpt2")
    merak::cli::fail(kTool, 2, step_dir + ": data.tokenizer '" + data.tokenizer +
                                   "' is neither byte nor gpt2");
  for (const auto& [key, path] : {std::pair{"data.vocab", data.vocab}, {"data.merges", data.merges}})
    if (!std::ifstream(path))
      merak::cli::fail(kTool, 2, std::string(key) + ": cannot open '" + path +
                                     "' (the checkpoint's tokenizer file, relative to the "
                                     "current directory; --vocab and --merges name others)");
  try {
    t.gpt2 = merak::data::Gpt2Tokenizer::load(data.vocab, data.merges);
  } catch (const merak::Error& e) {
    merak::cli::fail(kTool, 2, std::string("data.vocab / data.merges: ") + e.what());
  }
  return t;
}

// Writes the bytes of `text` up to the last complete UTF-8 character (all of it when `flush`),
// keeping the rest for the next call: multi-byte characters split across tokens print whole.
class Utf8Stream {
 public:
  void write(const std::string& bytes, bool flush = false) {
    pending_ += bytes;
    size_t end = pending_.size();
    if (!flush) {
      // Step back over a trailing lead byte whose continuation bytes have not come yet.
      for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
        const unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
        if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > back) end = pending_.size() - back;
        break;
      }
    }
    std::fwrite(pending_.data(), 1, end, stdout);
    std::fflush(stdout);
    pending_.erase(0, end);
  }

 private:
  std::string pending_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace merak;
  const cli::Args args = cli::parse(
      argc, argv, 1,
      {kTool,
       kUsage,
       {"--checkpoint", "--prompt", "--max-tokens", "--temperature", "--top-k", "--seed",
        "--device", "--vocab", "--merges"},
       {},
       false});
  const std::string path = args.one("--checkpoint"), prompt = args.one("--prompt");
  if (path.empty()) usage_error(kTool, "--checkpoint is required");
  // An empty prompt is one (it starts from the tokenizer's start); a missing one is a mistake.
  if (args.all("--prompt").empty()) usage_error(kTool, "--prompt is required");
  const int64_t max_tokens = cli::positive(kTool, args.one("--max-tokens", "100"), "--max-tokens");
  models::SamplingOptions sampling;
  sampling.temperature = number(args.one("--temperature", "1"), "--temperature");
  sampling.top_k = int64_t(count(args.one("--top-k", "0"), "--top-k"));
  sampling.seed = count(args.one("--seed", "1"), "--seed");
  const std::string device_name = args.one("--device", "cpu");
  if (device_name != "cpu" && device_name != "cuda")
    usage_error(kTool, "--device must be cpu or cuda, got '" + device_name + "'");
  try {
    Device device = Device::cpu();
    if (device_name == "cuda") {
      std::string why;
      if (cuda::device_count(&why) == 0)
        cli::fail(kTool, 2, "--device cuda: no GPU is usable" + (why.empty() ? "" : ": " + why));
      device = Device::cuda(0);
    }
    const std::string step_dir = checkpoint::resolve(path);
    const checkpoint::Index index = checkpoint::read_index(step_dir);
    config::Config cfg = config::parse(index.config, step_dir + "/index.json");
    cfg.data.vocab = args.one("--vocab", cfg.data.vocab);
    cfg.data.merges = args.one("--merges", cfg.data.merges);
    if (cfg.model.family != "gpt")
      cli::fail(kTool, 2, step_dir + " holds a " + cfg.model.family + " model; only gpt samples");
    // The decoder is the GPT Merak builds, with its key/value cache.
    if (!cfg.model.onnx.empty())
      cli::fail(kTool, 2, step_dir + " holds the network imported from " + cfg.model.onnx +
                              "; merak_generate samples the GPT Merak builds (model.family: gpt)");
    // GPT-2's files would be ignored by a byte checkpoint: a mistake about the checkpoint.
    for (const char* flag : {"--vocab", "--merges"})
      if (!args.all(flag).empty() && cfg.data.tokenizer == "byte")
        cli::fail(kTool, 2, std::string(flag) + ": the checkpoint's tokenizer is byte (" +
                                "data.tokenizer in " + step_dir + "/index.json), which reads no " +
                                "tokenizer files");
    Tokenizer tokenizer = make_tokenizer(cfg.data, step_dir);

    // The model's parameters, whole, from whatever layout wrote the pieces.
    std::vector<checkpoint::RegionRead> reads;
    std::vector<std::string> parameters;
    for (const auto& [name, shape] : models::GptDecoder::parameter_shapes(cfg.model)) {
      parameters.push_back(name);
      auto it = index.tensors.find(name);
      if (it == index.tensors.end())
        throw checkpoint::CheckpointError(step_dir + ": no tensor '" + name + "'");
      if (it->second.shape != shape)
        throw checkpoint::CheckpointError(
            step_dir + ": tensor '" + name + "' has shape " + shape_str(it->second.shape) +
            " there, " + shape_str(shape) + " in the model its config describes: a damaged index?");
      reads.push_back({name, shape, it->second.dtype, checkpoint::whole(shape),
                       Tensor::empty(shape, it->second.dtype)});
    }
    checkpoint::check_no_other_tensors(index, parameters);
    checkpoint::read_regions(index, reads);
    std::map<std::string, Tensor> weights;
    for (const checkpoint::RegionRead& r : reads) weights[r.tensor] = r.out;
    models::GptDecoder decoder(cfg.model, weights, device);

    std::vector<int64_t> ids = tokenizer.encode(prompt);
    if (ids.empty()) ids.push_back(tokenizer.start());
    if (int64_t(ids.size()) > cfg.model.max_seq)
      cli::fail(kTool, 2, "the prompt is " + std::to_string(ids.size()) +
                              " tokens, more than the model's context (model.max_seq " +
                              std::to_string(cfg.model.max_seq) + ")");
    // Sampling over the tokens both the model and the tokenizer know.
    const int64_t vocab = std::min(cfg.model.vocab, tokenizer.vocab());

    Utf8Stream out;
    out.write(prompt);
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor all = decoder.logits_for(ids);
    std::vector<float> logits = all.narrow(0, all.size(0) - 1, 1).to_vector<float>();
    const double prefill_s = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    int64_t generated = 0, steps = 0;
    std::string stop;
    while (true) {
      const int64_t id = models::sample_token(logits.data(), vocab, sampling, uint64_t(generated));
      if (tokenizer.gpt2 && id == tokenizer.gpt2->eot_id()) {
        stop = "<|endoftext|> sampled";
        break;
      }
      out.write(tokenizer.decode(id));
      if (++generated == max_tokens) break;
      if (decoder.length() == decoder.max_seq()) {
        stop = "the context is full (model.max_seq " + std::to_string(decoder.max_seq()) + ")";
        break;
      }
      logits = decoder.next(id).to_vector<float>();
      ++steps;
    }
    out.write("\n", /*flush=*/true);
    const double decode_s = seconds_since(t1);
    std::fprintf(stderr,
                 "merak_generate: %lld tokens after a %zu-token prompt%s%s; prefill %.1f ms, "
                 "decoding %.0f tokens/s on %s (step %lld of %s)\n",
                 static_cast<long long>(generated), ids.size(),
                 stop.empty() ? "" : ", stopped: ", stop.c_str(), prefill_s * 1e3,
                 decode_s > 0 ? double(steps) / decode_s : 0.0, device_name.c_str(),
                 static_cast<long long>(index.step), step_dir.c_str());
    return 0;
  } catch (const checkpoint::CheckpointError& e) {
    std::fprintf(stderr, "merak_generate: %s\n", e.what());
    return 2;
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "merak_generate: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "merak_generate: error: %s\n", e.what());
    return 1;
  }
}
