// The median the tools quote timings by: the middle value, the upper of the two middle ones for
// an even count (always a value that was measured). 0 for none.
#pragma once

#include <algorithm>
#include <vector>

namespace merak {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace merak
