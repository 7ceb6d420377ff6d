// The frame of koila's own state files (the optimizer's state, the random generators'): what
// a reader checks before it believes a byte, so that a missing, truncated, altered or newer
// file is refused before anything changes. Little-endian:
//   magic                 8 bytes, one per kind of file ("KOILAOPT", "KOILARNG")
//   format                u32, from 1
//   header bytes H        u32
//   payload bytes P       u64
//   header                H bytes (JSON: what the payload holds and where)
//   payload               P bytes
//   CRC-32                u32 of everything above (zlib's crc32)
// Written whole or not at all (base/atomic_file.h).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "base/atomic_file.h"

namespace koila {

// A kind of file, for its checks and its messages.
struct FrameKind {
  const char* magic;      // 8 characters, no terminator read
  uint32_t format;        // the newest format this koila writes and reads
  const char* what;       // "the optimizer state": "cannot load <what> from '<path>'"
  const char* a_what;     // "an optimizer state": "it is not <a_what> saved by koila"
  const char* unchanged;  // "the optimizer is unchanged": ends every message of a failed load
  const char* saving;     // "the optimizer state": AtomicFile's name for it
};

// Writes one file of `kind`: the prefix and header at once, then the payload in pieces, then
// commit() (Code::Io on any failure, the old file left).
class FrameWriter {
 public:
  FrameWriter(const std::string& path, const FrameKind& kind, const std::string& header, uint64_t payload_bytes);
  void put(const void* data, size_t size);
  void commit();

 private:
  AtomicFile file_;
  unsigned long crc_;
};

// Opens and checks one file of `kind`: that it exists and is no folder, its magic, its format
// (not newer than kind.format), its length against the prefix, and its checksum. Then the header,
// and the payload read in order. Every failure is Code::Io with kind's message.
class FrameReader {
 public:
  FrameReader(const std::string& path, const FrameKind& kind);
  const std::string& header() const { return header_; }
  uint64_t payload_bytes() const { return payload_bytes_; }
  // The next `size` bytes of the payload.
  void read(void* out, size_t size);
  [[noreturn]] void corrupt(const std::string& why) const;

 private:
  std::string path_;
  const FrameKind& kind_;
  std::ifstream in_;
  std::string header_;
  uint64_t payload_bytes_ = 0;
};

}  // namespace koila
