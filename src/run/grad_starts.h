// How the leaves' .grad stood when a plan read them (plan/memo.cpp reads them into the
// structure's key), handed on to the run so that it does not read them again: telling an
// all-zero .grad from one holding gradients takes reading it whole (unless koila zeroed it
// itself, zeroed_grads.h). Each is noted with the .grad's identity and version, so that a
// .grad replaced or written since is read again.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "base/pointer_index.h"
#include "run/executor.h"

namespace koila {

class GradStarts {
 public:
  // Reads how `leaf`'s .grad stands (grad_start) and notes it.
  GradStart read(const at::Tensor& leaf);

  // How `leaf`'s .grad stands: as noted, when nothing changed it since; else read.
  GradStart of(const at::Tensor& leaf) const;

  // Room for `leaves` leaves to be read without growing.
  void reserve(size_t leaves) { noted_.reserve(leaves); }

 private:
  struct Noted {
    GradStart start;
    const c10::TensorImpl* grad;  // null: absent
    int64_t version;
  };
  PointerIndex<c10::TensorImpl> index_;  // the leaf's position in noted_
  std::vector<Noted> noted_;
};

}  // namespace koila
