// The partitioner's report for people (--explain: a table per stage, then the imbalance of our
// split next to the baselines') and for scripts (--json: the same numbers).
#pragma once

#include <string>

#include "merak/partition/partitioner.h"

namespace merak::partition {

struct ReportHeader {
  std::string source;   // the config or ONNX file
  std::string hardware; // profile name
};

std::string explain(const Result& r, const Request& req, const ReportHeader& h);
std::string to_json(const Result& r, const Request& req, const ReportHeader& h);

}  // namespace merak::partition
