// The one JSON string escaper for files we write by hand (safetensors headers, reports,
// Chrome traces): quotes, backslashes and control characters escaped; other bytes pass as UTF-8.
#pragma once

#include <string>

namespace merak {

std::string json_quote(const std::string& s);

}  // namespace merak
