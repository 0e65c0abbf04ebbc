// merak_graph: makes and inspects Merak graphs.
//
//   merak_graph trace --config FILE.yaml -o OUT.pb [--batch N] [--seq N] [--set key=value ...]
//   merak_graph import MODEL.onnx -o OUT.pb [--input NAME=2x64 ...] [--dim SYMBOL=N ...]
//   merak_graph summary FILE.pb
//   merak_graph dump FILE.pb
//
// Exit codes: 0 done, 2 bad command line, config or file (one line saying what), 1 any other
// failure.
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <sys/resource.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "merak/config/config.h"
#include "merak/core/read_file.h"
#include "merak/graph/onnx_import.h"
#include "merak/graph/summary.h"
#include "merak/graph/tracer.h"
#include "tools/common/cli.h"
#include "tools/common/import_args.h"
#include "models/model.h"

namespace {

using merak::graph::Model;

const char* kUsage =
    "usage: merak_graph trace --config FILE.yaml -o OUT.pb [--batch N] [--seq N] "
    "[--set key=value ...]\n"
    "       merak_graph import MODEL.onnx -o OUT.pb [--input NAME=2x64 ...] [--dim SYMBOL=N ...]\n"
    "       merak_graph summary FILE.pb\n"
    "       merak_graph dump FILE.pb\n";

using merak::cli::Args;

[[noreturn]] void fail(int code, const std::string& message) {
  merak::cli::fail("merak_graph", code, message);
}
[[noreturn]] void usage(const std::string& problem) {
  merak::cli::usage_error("merak_graph", problem);
}

Args parse(int argc, char** argv, int first, const std::vector<std::string>& with_value) {
  return merak::cli::parse(argc, argv, first, {"merak_graph", kUsage, with_value, {}, true});
}

int64_t positive(const std::string& text, const std::string& what) {
  return merak::cli::positive("merak_graph", text, what);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

Model read_model(const std::string& path) {
  std::string bytes, why;
  if (!merak::read_file(path, &bytes, &why)) fail(2, "cannot read '" + path + "' (" + why + ")");
  Model m;
  bool parsed;
  {
    // The message below says what is wrong; protobuf's own log line (a string field that is
    // not UTF-8, say) would come before it.
    google::protobuf::LogSilencer quiet;
    parsed = m.ParseFromString(bytes);
  }
  if (!parsed) fail(2, path + ": not a Merak graph (protobuf parse failed)");
  if (m.graph().nodes_size() == 0 && m.graph().initializers_size() == 0)
    fail(2, path + ": holds no graph (no nodes, no initializers)");
  return m;
}

void write_model(const Model& m, const std::string& path) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !m.SerializeToOstream(&out) || !out.flush())
    fail(2, "cannot write '" + path + "'" +
                (errno ? std::string(" (") + std::strerror(errno) + ")" : ""));
}

std::string human(double v) {
  const char* units[] = {"", " K", " M", " G", " T", " P"};
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g%s", v, units[u]);
  return buf;
}

int cmd_trace(const Args& a) {
  using namespace merak;
  if (!a.positional().empty())
    usage("trace takes no positional argument ('" + a.positional()[0] + "')");
  const std::string config_path = a.one("--config"), out = a.one("-o");
  if (config_path.empty()) usage("trace needs --config FILE.yaml");
  if (out.empty()) usage("trace needs -o OUT.pb");
  config::Config cfg;
  try {
    cfg = config::load(config_path, a.all("--set"));
  } catch (const config::ConfigError& e) {
    fail(2, e.what());
  }
  // trace builds model.family's network; an imported one is `import`'s.
  if (!cfg.model.onnx.empty())
    fail(2, config_path + ": key 'model.onnx': the network is imported, not built: merak_graph "
                          "import " + cfg.model.onnx + " makes its graph");
  const int64_t batch = positive(a.one("--batch", "1"), "--batch");
  if (batch > config::kMaxWidth)  // the bound config::load puts on train.batch
    fail(2, "--batch " + std::to_string(batch) + " exceeds " + std::to_string(config::kMaxWidth) +
                " (the bound on train.batch)");
  const int64_t seq = positive(a.one("--seq", std::to_string(cfg.train.seq_len)), "--seq");
  if (seq > cfg.model.max_seq)
    fail(2, config_path + ": --seq " + std::to_string(seq) + " exceeds model.max_seq " +
                std::to_string(cfg.model.max_seq));

  const int64_t allocations = cpu_memory_stats().allocations;
  const auto start = std::chrono::steady_clock::now();
  auto model = models::make_model(cfg.model);
  Model m;
  try {
    m = graph::trace_model(*model, batch, seq, cfg.train.seed);
  } catch (const Error& e) {
    // The config is valid, so what fails here is most likely a tensor too large to count at
    // --batch x --seq; the message says what it was.
    fail(2, config_path + ": tracing at --batch " + std::to_string(batch) + " --seq " +
                std::to_string(seq) + ": " + e.what());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t allocated = cpu_memory_stats().allocations - allocations;
  const double rss = peak_rss_mb();
  write_model(m, out);

  const graph::Summary s = graph::summarize(m);
  const auto& o = model->options();
  std::printf(
      "traced %s (%s, %lld layers, hidden %lld, heads %lld, vocab %lld) at batch %lld x "
      "seq %lld\n",
      config_path.c_str(), o.family.c_str(), (long long)o.layers, (long long)o.hidden,
      (long long)o.heads, (long long)o.vocab, (long long)batch, (long long)seq);
  std::printf("nodes: %lld\n", (long long)s.nodes);
  std::printf("parameters: %lld (%s)\n", (long long)s.parameters,
              human(double(s.parameters)).c_str());
  std::printf("FLOPs per token (forward + backward, op registry): %s (model formula: %s)\n",
              human(s.flops_per_token()).c_str(), human(model->flops_per_token(seq)).c_str());
  std::printf("trace time: %.3f s (build the model on Meta + trace)\n", seconds);
  std::printf("peak RSS: %.1f MB; CPU tensor allocations during the trace: %lld\n", rss,
              (long long)allocated);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

int cmd_import(const Args& a) {
  using namespace merak;
  if (a.positional().size() != 1) usage("import takes one MODEL.onnx");
  const std::string out = a.one("-o");
  if (out.empty()) usage("import needs -o OUT.pb");
  const graph::ImportOptions options = cli::import_options("merak_graph", a);
  Model m;
  try {
    m = graph::import_onnx(a.positional()[0], options);
  } catch (const graph::ImportError& e) {
    fail(2, e.what());
  }
  write_model(m, out);
  std::printf("imported %s: %d nodes, %d initializers\nwrote %s\n", a.positional()[0].c_str(),
              m.graph().nodes_size(), m.graph().initializers_size(), out.c_str());
  return 0;
}

int cmd_summary(const Args& a) {
  using namespace merak;
  if (a.positional().size() != 1) usage("summary takes one FILE.pb");
  const std::string& path = a.positional()[0];
  const Model m = read_model(path);
  graph::Summary s;
  try {
    s = graph::summarize(m);
  } catch (const Error& e) {
    fail(2, path + ": " + e.what());
  }
  std::printf("%s: producer '%s'", path.c_str(), m.producer().c_str());
  if (m.opset_version()) std::printf(", opset %lld", (long long)m.opset_version());
  std::printf("\n%s", graph::format_summary(s).c_str());
  return 0;
}

int cmd_dump(const Args& a) {
  if (a.positional().size() != 1) usage("dump takes one FILE.pb");
  const Model m = read_model(a.positional()[0]);
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(m, &text)) fail(1, "cannot print the graph");
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage("no command");
  const std::string cmd = argv[1];
  try {
    if (cmd == "trace")
      return cmd_trace(parse(argc, argv, 2, {"--config", "-o", "--batch", "--seq", "--set"}));
    if (cmd == "import") return cmd_import(parse(argc, argv, 2, {"-o", "--input", "--dim"}));
    if (cmd == "summary") return cmd_summary(parse(argc, argv, 2, {}));
    if (cmd == "dump") return cmd_dump(parse(argc, argv, 2, {}));
    if (cmd == "-h" || cmd == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  } catch (const std::exception& e) {
    fail(1, e.what());
  }
  usage("unknown command '" + cmd + "'");
}
