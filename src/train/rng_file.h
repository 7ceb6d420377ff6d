// The random generators' states in a file (koila_rng_save / _load): with the module's and the
// optimizer's files, what a restarted run needs to draw the dropout masks that the run that
// never stopped draws.
//
// The frame of base/framed_file.h, magic "KOILARNG", format 1. The header is JSON:
//   {"generators": [{"device": "cpu", "bytes": N}, {"device": "cuda:0", "bytes": M}, ...]}
// and the payload each generator's state (LibTorch's Generator::get_state, a byte tensor) in
// that order. The CPU's default generator is always saved; with CUDA, every CUDA device's.
#pragma once

#include <string>

namespace koila {

// Written whole or not at all; Code::Io on failure.
void save_random_states(const std::string& path);

// Code::Io: missing, unreadable, not a generator file, a newer format, truncated, corrupt, or a
// state this LibTorch's generator refuses. Code::InvalidArgument: a CUDA device this process
// does not have (named). Either way no generator changes.
void load_random_states(const std::string& path);

}  // namespace koila
