#include "run/grad_starts.h"

namespace koila {

namespace {

// The .grad's version, or -1 where it has none to trust (an inference tensor).
int64_t version_of(const at::Tensor& grad) { return grad.is_inference() ? -1 : static_cast<int64_t>(grad._version()); }

// Whether `t` has a .grad of its own to read (reading a non-leaf's makes LibTorch warn).
bool has_own_grad(const at::Tensor& t) { return t.defined() && t.requires_grad() && t.is_leaf(); }

}  // namespace

GradStart GradStarts::read(const at::Tensor& leaf) {
  const GradStart start = grad_start(leaf);
  if (!has_own_grad(leaf)) return start;  // Absent; not noted
  const at::Tensor& g = leaf.grad();
  const Noted noted{start, g.defined() ? g.unsafeGetTensorImpl() : nullptr, g.defined() ? version_of(g) : 0};
  const c10::TensorImpl* impl = leaf.unsafeGetTensorImpl();
  if (index_.insert(impl, static_cast<uint32_t>(noted_.size())))
    noted_.push_back(noted);
  else
    noted_[index_.find(impl)] = noted;
  return start;
}

GradStart GradStarts::of(const at::Tensor& leaf) const {
  const uint32_t found = index_.find(leaf.unsafeGetTensorImpl());
  if (found == PointerIndex<c10::TensorImpl>::kAbsent || !has_own_grad(leaf)) return grad_start(leaf);
  const Noted& n = noted_[found];
  const at::Tensor& g = leaf.grad();
  if (!g.defined()) return n.grad == nullptr ? GradStart::Absent : grad_start(leaf);
  const int64_t version = version_of(g);
  if (g.unsafeGetTensorImpl() != n.grad || version < 0 || version != n.version) return grad_start(leaf);
  return n.start;
}

}  // namespace koila
