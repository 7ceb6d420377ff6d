#include "graph/batch_rules.h"

#include <algorithm>

#include "base/dims.h"
#include "base/text.h"

namespace koila::batch {

BatchResult couple(std::string reason) {
  BatchResult r;
  r.couples = std::move(reason);
  return r;
}

std::string unbatched_spanning(const Metas& in, int64_t out_rank, int64_t out_pos) {
  for (size_t i = 0; i < in.size(); ++i) {
    const Meta* m = in[i];
    if (!m || m->batch_dim >= 0) continue;
    const int64_t rank = static_cast<int64_t>(m->shape.size());
    const int64_t q = out_pos - (out_rank - rank);
    if (q >= 0 && q < rank && m->shape[q] != 1)
      return "unbatched operand " + std::to_string(i) + " of shape " + shape_string(m->shape) +
             " spans the batch dim (size " + std::to_string(m->shape[q]) +
             "); wrap it with koila_lazy on the same batch dim or give it size 1 there";
  }
  return {};
}

BatchResult elementwise(const Metas& in, const Meta& out) {
  const int64_t out_rank = static_cast<int64_t>(out.shape.size());
  int64_t pos = -1;
  for (size_t i = 0; i < in.size(); ++i) {
    const Meta* m = in[i];
    if (!m || m->batch_dim < 0) continue;
    const int64_t p = m->batch_dim + out_rank - static_cast<int64_t>(m->shape.size());
    if (m->shape[m->batch_dim] != out.shape[p])
      return couple("operand " + std::to_string(i) + " broadcasts its batch dim (size " +
                    std::to_string(m->shape[m->batch_dim]) + ") to size " + std::to_string(out.shape[p]));
    if (pos >= 0 && pos != p)
      return couple("operands carry their batch in different dims of the result (" + std::to_string(pos) + " and " +
                    std::to_string(p) + ")");
    pos = p;
  }
  if (pos < 0) return {};
  std::string spanning = unbatched_spanning(in, out_rank, pos);
  if (!spanning.empty()) return couple(spanning);
  BatchResult r;
  r.batch_dim = pos;
  return r;
}

BatchRule same_dims_except(std::vector<int64_t> mixed, std::string what) {
  return [mixed = std::move(mixed), what = std::move(what)](const Metas& in, const Meta& out) {
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i] && in[i]->batch_dim >= 0)
        return couple("its operand " + std::to_string(i) + " is batched (only the input may be)");
    const Meta& x = *in[0];
    if (x.batch_dim < 0) return BatchResult{};
    if (std::find(mixed.begin(), mixed.end(), x.batch_dim) != mixed.end())
      return couple(what + " along the batch dim " + std::to_string(x.batch_dim));
    BatchResult r;
    r.batch_dim = x.batch_dim;
    if (out.shape.size() != x.shape.size() || out.shape[x.batch_dim] != x.shape[x.batch_dim])
      return couple("changes the size of the batch dim");
    return r;
  };
}

BatchRule reduce(std::vector<int64_t> dims, bool keepdim, BatchReduction reduction) {
  return [dims = std::move(dims), keepdim, reduction](const Metas& in, const Meta&) {
    const Meta& x = *in[0];
    if (x.batch_dim < 0) return BatchResult{};
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    std::vector<int64_t> reduced;
    if (dims.empty()) {
      for (int64_t d = 0; d < rank; ++d) reduced.push_back(d);
    } else {
      for (int64_t d : dims) reduced.push_back(normalize_dim(d, rank, "dim"));
    }
    BatchResult r;
    if (std::find(reduced.begin(), reduced.end(), x.batch_dim) != reduced.end()) {
      r.reduction = reduction;
      if (reduction == BatchReduction::None) r.couples = "reduces over the batch dim";
      return r;
    }
    r.batch_dim = x.batch_dim;
    if (!keepdim)
      r.batch_dim -= std::count_if(reduced.begin(), reduced.end(), [&](int64_t d) { return d < x.batch_dim; });
    return r;
  };
}

BatchResult view(const std::vector<int64_t>& in_shape, int64_t batch_dim, const std::vector<int64_t>& out_shape) {
  const int64_t size = in_shape[batch_dim];
  int64_t before = 1;
  for (int64_t d = 0; d < batch_dim; ++d) before *= in_shape[d];
  int64_t prefix = 1;
  for (size_t j = 0; j < out_shape.size(); ++j) {
    if (prefix == before && out_shape[j] == size) {
      BatchResult r;
      r.batch_dim = static_cast<int64_t>(j);
      return r;
    }
    prefix *= out_shape[j];
    if (prefix > before && before != 0) break;
  }
  return couple("reshapes " + shape_string(in_shape) + " to " + shape_string(out_shape) +
                ", which merges or splits the batch dim " + std::to_string(batch_dim));
}

}  // namespace koila::batch
