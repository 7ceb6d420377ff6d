#include "base/libtorch_compat.h"

namespace koila::compat {

int64_t concrete_int(const c10::IValue& v) {
#if TORCH_VERSION_MAJOR >= 2
  if (v.isSymInt()) return v.toSymInt().expect_int();
#endif
  return v.toInt();
}

std::vector<int64_t> concrete_ints(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  for (const c10::IValue& e : v.toListRef()) out.push_back(concrete_int(e));
  return out;
}

}  // namespace koila::compat
