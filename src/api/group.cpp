// The C entry points for process groups (group.h).
#include <chrono>

#include "api/args.h"
#include "api/handles.h"
#include "base/error.h"
#include "dist/group.h"
#include "graph/graph.h"

using namespace koila;

extern "C" {

KOILA_API koila_status* koila_group_new(koila_group** out, const char* backend, const char* init, int rank,
                                        int world_size, int64_t timeout_ms) {
  return guard(__func__, [&] {
    arg::out(out);
    arg::not_null(backend, "backend");
    arg::not_null(init, "init");
    if (world_size < 1) fail(Code::InvalidArgument, "world_size must be at least 1, got " + std::to_string(world_size));
    if (rank < 0 || rank >= world_size)
      fail(Code::InvalidArgument, "rank " + std::to_string(rank) + " is out of range for world_size " +
                                      std::to_string(world_size) + " (0.." + std::to_string(world_size - 1) + ")");
    if (timeout_ms <= 0) fail(Code::InvalidArgument, "timeout_ms must be positive, got " + std::to_string(timeout_ms));
    auto group = std::make_unique<koila_group>();
    group->group = std::make_unique<Group>(backend, init, rank, world_size, std::chrono::milliseconds(timeout_ms));
    *out = group.release();
  });
}

KOILA_API koila_status* koila_group_new_from_env(koila_group** out, const char* backend, int64_t timeout_ms) {
  return guard(__func__, [&] {
    arg::out(out);
    arg::not_null(backend, "backend");
    if (timeout_ms <= 0) fail(Code::InvalidArgument, "timeout_ms must be positive, got " + std::to_string(timeout_ms));
    auto group = std::make_unique<koila_group>();
    group->group = Group::from_env(backend, std::chrono::milliseconds(timeout_ms));
    *out = group.release();
  });
}

KOILA_API int koila_group_rank(const koila_group* g) { return g ? g->group->rank() : -1; }

KOILA_API int koila_group_local_rank(const koila_group* g) { return g ? g->group->local_rank() : -1; }

KOILA_API int koila_group_size(const koila_group* g) { return g ? g->group->size() : -1; }

KOILA_API koila_status* koila_group_broadcast(koila_group* g, koila_tensor* const* ts, size_t n, int root) {
  return guard(__func__, [&] {
    Group& group = *arg::handle(g, "g").group;
    group.broadcast([&] { return arg::tensors(ts, n, "ts", /*may_be_empty=*/true); }, root);
  });
}

KOILA_API koila_status* koila_group_backward(koila_group* g, const koila_tensor* loss, koila_tensor* const* params,
                                             size_t n) {
  return guard(__func__, [&] {
    Group& group = *arg::handle(g, "g").group;
    group.backward([&] {
      const NodePtr& node = node_of(loss, "loss");
      return std::make_pair(node, arg::tensors(params, n, "params"));
    });
  });
}

KOILA_API void koila_group_free(koila_group* g) { delete g; }

}  // extern "C"
