#include "merak/log/log.h"

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <memory>
#include <mutex>
#include <stdexcept>

namespace merak::log {
namespace {

// Two loggers, one a stream: spdlog's sinks filter by a least level only, and the split is by
// level (below Warn to stdout, the rest to stderr).
struct Loggers {
  std::shared_ptr<spdlog::logger> out, err;
  Level least = Level::Info;
};

spdlog::level::level_enum to_spdlog(Level l) {
  switch (l) {
    case Level::Debug: return spdlog::level::debug;
    case Level::Info: return spdlog::level::info;
    case Level::Warn: return spdlog::level::warn;
    case Level::Error: return spdlog::level::err;
    case Level::Off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::mutex& mutex() {
  static std::mutex m;
  return m;
}

Loggers make(int rank, Level least) {
  Loggers l;
  l.least = least;
  l.out = std::make_shared<spdlog::logger>("merak.out",
                                           std::make_shared<spdlog::sinks::stdout_sink_mt>());
  l.err = std::make_shared<spdlog::logger>("merak.err",
                                           std::make_shared<spdlog::sinks::stderr_sink_mt>());
  const std::string who = rank == 0 ? "" : "[rank " + std::to_string(rank) + "] ";
  l.out->set_pattern(who + "%v");
  l.err->set_pattern(who + "%v");
  for (auto* logger : {l.out.get(), l.err.get()}) {
    logger->set_level(to_spdlog(least));
    logger->flush_on(spdlog::level::trace);  // interleaved with printf'd lines in order
  }
  return l;
}

Loggers& loggers() {
  static Loggers l = make(0, Level::Info);
  return l;
}

}  // namespace

Level parse_level(const std::string& name) {
  if (name == "debug") return Level::Debug;
  if (name == "info") return Level::Info;
  if (name == "warn" || name == "warning") return Level::Warn;
  if (name == "error") return Level::Error;
  if (name == "off") return Level::Off;
  throw std::invalid_argument("unknown log level '" + name +
                              "' (debug, info, warn, error or off)");
}

void setup(int rank, Level level) {
  std::lock_guard<std::mutex> lock(mutex());
  loggers() = make(rank, level);
}

bool enabled(Level level) {
  std::lock_guard<std::mutex> lock(mutex());
  return level != Level::Off && level >= loggers().least;
}

void message(Level level, const std::string& text) {
  std::shared_ptr<spdlog::logger> to;
  {
    std::lock_guard<std::mutex> lock(mutex());
    if (level == Level::Off || level < loggers().least) return;
    to = level >= Level::Warn ? loggers().err : loggers().out;
  }
  // spdlog's own level names are short ("warn", "err"); these read as words.
  const char* tag = level == Level::Warn ? "warning: " : level == Level::Error ? "error: " : "";
  to->log(to_spdlog(level), "{}{}", tag, text);
}

}  // namespace merak::log
