// The median of a benchmark's samples (the upper of the middle two for an even count; 0 for
// none), shared by every benchmark program.
#pragma once

#include <algorithm>
#include <vector>

namespace bench {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace bench
