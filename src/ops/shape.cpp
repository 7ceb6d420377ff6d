// Shape operators. They move the batch dim (permute, transpose, squeeze, unsqueeze, stack)
// or keep it when it is left whole (reshape, flatten); selecting or joining along the batch
// mixes samples.
#include "ops/ops.h"

#include "ops/common.h"

using namespace koila;
using batch::Metas;

namespace {

BatchResult at_dim(int64_t dim) {
  BatchResult r;
  r.batch_dim = dim;
  return r;
}

BatchResult view_batch(const Metas& in, const Meta& out) {
  return batch::view(in[0]->shape, in[0]->batch_dim, out.shape);
}

// Joining a list: every batched input must carry the batch at the same dim `pos_in`, which
// lands at `pos_out`; joining along it mixes samples.
BatchResult join_batch(const Metas& in, const Meta& out, int64_t join_dim, bool new_dim) {
  int64_t pos = -1;
  for (const Meta* m : in) {
    if (m->batch_dim < 0) continue;
    if (!new_dim && m->batch_dim == join_dim) return batch::couple("concatenates along the batch dim");
    if (pos >= 0 && pos != m->batch_dim) return batch::couple("inputs carry their batch in different dims");
    pos = m->batch_dim;
  }
  if (pos < 0) return {};
  const int64_t out_pos = new_dim && pos >= join_dim ? pos + 1 : pos;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i]->batch_dim < 0 && in[i]->shape[pos] != 1)
      return batch::couple("input " + std::to_string(i) + " of shape " + shape_string(in[i]->shape) +
                           " is not batched but spans the batch dim; wrap it with koila_lazy too");
  (void)out;
  return at_dim(out_pos);
}

}  // namespace

namespace koila::ops {

NodePtr reshape(const char* name, const NodePtr& input, std::vector<int64_t> target) {
  for (int64_t s : target)
    if (s < -1) fail(Code::InvalidArgument, "invalid size " + std::to_string(s) + " in shape " + shape_string(target));
  return build(OpSpec{.name = name,
                      .run =
                          [target](const Tensors& in, const Node& self) {
                            // The inferred full shape with the batch dim resized to the chunk at hand,
                            // so that literal batch sizes written by the caller also fit a chunk.
                            if (self.meta.batch_dim < 0) return at::reshape(in[0], target);
                            std::vector<int64_t> shape = self.meta.shape;
                            shape[self.meta.batch_dim] = in[0].size(self.inputs[0]->meta.batch_dim);
                            return at::reshape(in[0], shape);
                          },
                      .batch = view_batch},
               {input});
}

NodePtr flatten(const char* name, const NodePtr& input, int64_t start, int64_t end) {
  const int64_t rank = rank_of(input);
  const int64_t s = normalize_dim(start, rank, "start"), e = normalize_dim(end, rank, "end");
  if (s > e)
    fail(Code::InvalidArgument,
         "flatten: start (" + std::to_string(start) + ") must not come after end (" + std::to_string(end) + ")");
  return build(OpSpec{.name = name,
                      .run = [s, e](const Tensors& in, const Node&) { return at::flatten(in[0], s, e); },
                      .batch = view_batch},
               {input});
}

void check_permute_count(const NodePtr& input, size_t ndim) {
  const int64_t rank = rank_of(input);
  if (static_cast<int64_t>(ndim) != rank)
    fail(Code::InvalidArgument, "permute needs " + std::to_string(rank) + " dims for a tensor of shape " +
                                    shape_string(input->meta.shape) + ", got " + std::to_string(ndim));
}

NodePtr permute(const char* name, const NodePtr& input, std::vector<int64_t> given) {
  check_permute_count(input, given.size());
  const int64_t rank = rank_of(input);
  std::vector<int64_t> order;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t dim : given) {
    const int64_t d = normalize_dim(dim, rank, "dim");
    if (seen[d]) fail(Code::InvalidArgument, "permute: dim " + std::to_string(dim) + " repeats");
    seen[d] = true;
    order.push_back(d);
  }
  OpSpec spec{.name = name,
              .run = [order](const Tensors& in, const Node&) { return in[0].permute(order); },
              .batch =
                  [order](const Metas& in, const Meta&) {
                    const int64_t b = in[0]->batch_dim;
                    if (b < 0) return BatchResult{};
                    return at_dim(std::find(order.begin(), order.end(), b) - order.begin());
                  }};
  // The order sets the result's strides, and so whether what follows copies it (a reshape).
  for (int64_t d : order) spec.signature += std::to_string(d) + ",";
  return build(std::move(spec), {input});
}

NodePtr transpose(const char* name, const NodePtr& input, int64_t d0, int64_t d1) {
  const int64_t rank = rank_of(input);
  const int64_t a = normalize_dim(d0, rank, "d0"), b = normalize_dim(d1, rank, "d1");
  return build(OpSpec{.name = name,
                      .run = [a, b](const Tensors& in, const Node&) { return in[0].transpose(a, b); },
                      .batch =
                          [a, b](const Metas& in, const Meta&) {
                            const int64_t bd = in[0]->batch_dim;
                            return at_dim(bd == a ? b : bd == b ? a : bd);
                          },
                      // (the dims set the result's strides, as permute's order does)
                      .signature = std::to_string(std::min(a, b)) + "," + std::to_string(std::max(a, b))},
               {input});
}

NodePtr squeeze(const char* name, const NodePtr& input, int64_t dim) {
  const int64_t d = normalize_dim(dim, rank_of(input), "dim");
  // Whether the dim goes is decided here, on the full shape: a chunk of one sample
  // must not lose a batch dim that the whole batch keeps (found by the API fuzzer).
  const bool removes = rank_of(input) > 0 && input->meta.shape[d] == 1;
  return build(
      OpSpec{.name = name,
             .run = [d, removes](const Tensors& in, const Node&) { return removes ? in[0].squeeze(d) : in[0].alias(); },
             .batch =
                 [d](const Metas& in, const Meta& out) {
                   const Meta& m = *in[0];
                   if (m.batch_dim < 0 || out.shape.size() == m.shape.size()) return at_dim(m.batch_dim);
                   if (m.batch_dim == d) return batch::couple("squeezes away the batch dim");
                   return at_dim(m.batch_dim > d ? m.batch_dim - 1 : m.batch_dim);
                 }},
      {input});
}

NodePtr unsqueeze(const char* name, const NodePtr& input, int64_t dim) {
  const int64_t d = normalize_dim(dim, rank_of(input) + 1, "dim");
  return build(OpSpec{.name = name,
                      .run = [d](const Tensors& in, const Node&) { return in[0].unsqueeze(d); },
                      .batch =
                          [d](const Metas& in, const Meta&) {
                            const int64_t b = in[0]->batch_dim;
                            return at_dim(b >= d ? b + 1 : b);
                          }},
               {input});
}

NodePtr cat(const char* name, const std::vector<NodePtr>& nodes, int64_t dim) {
  const int64_t rank = rank_of(nodes[0]);
  if (rank == 0) fail(Code::Shape, "cat cannot join scalars (rank 0); use koila_stack");
  for (const NodePtr& node : nodes)
    if (rank_of(node) != rank) fail(Code::Shape, "cat needs tensors of the same rank, got " + describe_inputs(nodes));
  const int64_t d = normalize_dim(dim, rank, "dim");
  return build(OpSpec{.name = name,
                      .run = [d](const Tensors& in, const Node&) { return at::cat(in, d); },
                      .batch = [d](const Metas& in, const Meta& out) { return join_batch(in, out, d, false); }},
               nodes);
}

NodePtr stack(const char* name, const std::vector<NodePtr>& nodes, int64_t dim) {
  const int64_t d = normalize_dim(dim, rank_of(nodes[0]) + 1, "dim");
  return build(OpSpec{.name = name,
                      .run = [d](const Tensors& in, const Node&) { return at::stack(in, d); },
                      .batch = [d](const Metas& in, const Meta& out) { return join_batch(in, out, d, true); }},
               nodes);
}

NodePtr narrow(const char* name, const NodePtr& input, int64_t dim, int64_t start, int64_t length) {
  const int64_t rank = rank_of(input);
  if (rank == 0) fail(Code::Shape, "narrow needs a tensor of rank 1 or more, got a scalar");
  const int64_t d = normalize_dim(dim, rank, "dim");
  const int64_t size = input->meta.shape[d];
  const int64_t s = start < 0 ? start + size : start;
  if (s < 0 || s > size || length < 0 || length > size - s)
    fail(Code::InvalidArgument, "narrow: start " + std::to_string(start) + " and length " + std::to_string(length) +
                                    " do not fit dim " + std::to_string(dim) + " of size " + std::to_string(size));
  return build(OpSpec{.name = name,
                      .run = [d, s, length](const Tensors& in, const Node&) { return in[0].narrow(d, s, length); },
                      .batch = batch::same_dims_except({d}, "selects a range")},
               {input});
}

NodePtr index_select(const char* name, const NodePtr& input, int64_t dim, const NodePtr& idx) {
  const int64_t d = normalize_dim(dim, rank_of(input), "dim");
  if (idx->meta.dtype != at::kLong && idx->meta.dtype != at::kInt)
    fail(Code::Dtype, std::string("index must be KOILA_INT64 or KOILA_INT32, got ") + dtype_name(idx->meta.dtype));
  if (rank_of(idx) > 1) fail(Code::Shape, "index must be 1-D, got " + shape_string(idx->meta.shape));
  return build(OpSpec{.name = name,
                      .run = [d](const Tensors& in, const Node&) { return at::index_select(in[0], d, in[1]); },
                      .batch =
                          [d](const Metas& in, const Meta&) {
                            const Meta &m = *in[0], &i = *in[1];
                            if (m.batch_dim >= 0 && i.batch_dim >= 0)
                              return batch::couple("both input and index are batched");
                            if (i.batch_dim >= 0) return at_dim(d);
                            if (m.batch_dim == d) return batch::couple("selects samples along the batch dim");
                            return at_dim(m.batch_dim);
                          }},
               {input, idx});
}

}  // namespace koila::ops
