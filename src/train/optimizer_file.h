// An optimizer's state in a file (koila_optimizer_save / _load): what a restarted run needs
// to continue exactly where the stopped one was.
//
// Format 1, little-endian:
//   "KOILAOPT"            8 bytes
//   format                u32 (1)
//   header bytes H        u32
//   payload bytes P       u64
//   header                H bytes of JSON: the kind, the hyperparameters (doubles written
//                         so that they read back bit for bit), and per parameter its dtype,
//                         shape and state (null before its first step, or the step count
//                         and the names, offsets and sizes of its state tensors)
//   payload               P bytes: the state tensors' elements, row-major, one after the other
//   CRC-32                u32 of everything above (zlib's crc32)
// A reader refuses a newer format, a wrong length and a wrong checksum before it looks at
// the header, and changes nothing unless the whole file is good and matches.
#pragma once

#include <string>

#include "train/optimizer.h"

namespace koila {

// Written whole or not at all (base/atomic_file.h); Code::Io on failure.
void save_optimizer(const Optimizer& o, const std::string& path);

// Code::Io: missing, unreadable, not an optimizer state, a newer format, truncated,
// corrupt. Code::InvalidArgument: another kind, another number of parameters, a
// parameter of another dtype or shape (the first named). Either way `o` is unchanged.
void load_optimizer(Optimizer& o, const std::string& path);

}  // namespace koila
