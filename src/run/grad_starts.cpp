#include "run/grad_starts.h"

namespace koila {

namespace {

// The .grad's version, or -1 where it has none to trust (an inference tensor).
int64_t version_of(const at::Tensor& grad) { return grad.is_inference() ? -1 : static_cast<int64_t>(grad._version()); }

}  // namespace

GradStart GradStarts::read(const at::Tensor& leaf) {
  const GradStart start = grad_start(leaf);
  const at::Tensor& g = leaf.grad();
  noted_[leaf.unsafeGetTensorImpl()] =
      Noted{start, g.defined() ? g.unsafeGetTensorImpl() : nullptr, g.defined() ? version_of(g) : 0};
  return start;
}

GradStart GradStarts::of(const at::Tensor& leaf) const {
  auto found = noted_.find(leaf.unsafeGetTensorImpl());
  if (found == noted_.end() || !leaf.requires_grad()) return grad_start(leaf);
  const Noted& n = found->second;
  const at::Tensor& g = leaf.grad();
  if (!g.defined()) return n.grad == nullptr ? GradStart::Absent : grad_start(leaf);
  const int64_t version = version_of(g);
  if (g.unsafeGetTensorImpl() != n.grad || version < 0 || version != n.version) return grad_start(leaf);
  return n.start;
}

}  // namespace koila
