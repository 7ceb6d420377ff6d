#include "libtorch_compat.h"

#include <cstring>

namespace koila::compat {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
void Allocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (dest != nullptr && src != nullptr) std::memcpy(dest, src, count);
}
#endif

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
