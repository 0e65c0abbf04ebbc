// Messages about a run, for people: levels, a rank prefix, and where each goes. Through spdlog,
// set up once by a tool's main; the header keeps spdlog out of the files that log.
//
// Info and debug go to stdout, warnings and errors to stderr ("warning: ...", "error: ...").
// Rank 0's messages are plain; another rank's start with "[rank N] ", so a job's merged output
// says who spoke. A tool's own output (merak_train's step lines, a summary) is not a message and
// is printed as it is.
#pragma once

#include <string>

namespace merak::log {

enum class Level { Debug, Info, Warn, Error, Off };

// "debug", "info", "warn" (or "warning"), "error", "off"; anything else throws naming the value.
Level parse_level(const std::string& name);

// This process's rank (for the prefix) and the least level shown; before it is called, rank 0
// and Info.
void setup(int rank, Level level);
bool enabled(Level level);

void message(Level level, const std::string& text);
inline void debug(const std::string& text) { message(Level::Debug, text); }
inline void info(const std::string& text) { message(Level::Info, text); }
inline void warn(const std::string& text) { message(Level::Warn, text); }
inline void error(const std::string& text) { message(Level::Error, text); }

}  // namespace merak::log
