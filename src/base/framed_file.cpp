#include "base/framed_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace koila {
namespace {

constexpr size_t kPrefix = 8 + 4 + 4 + 8;  // magic, format, header bytes, payload bytes
constexpr size_t kTrailer = 4;             // CRC-32

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the frame's integers are written as they lie in memory");

}  // namespace

FrameWriter::FrameWriter(const std::string& path, const FrameKind& kind, const std::string& header,
                         uint64_t payload_bytes)
    : file_(path, kind.saving), crc_(crc32_z(0, nullptr, 0)) {
  const uint32_t format = kind.format, header_bytes = static_cast<uint32_t>(header.size());
  put(kind.magic, 8);
  put(&format, sizeof format);
  put(&header_bytes, sizeof header_bytes);
  put(&payload_bytes, sizeof payload_bytes);
  put(header.data(), header.size());
}

void FrameWriter::put(const void* data, size_t size) {
  crc_ = crc32_z(crc_, static_cast<const Bytef*>(data), size);
  file_.write(data, size);
}

void FrameWriter::commit() {
  const uint32_t crc = static_cast<uint32_t>(crc_);
  file_.write(&crc, sizeof crc);
  file_.commit();
}

void FrameReader::corrupt(const std::string& why) const {
  fail(Code::Io, std::string("cannot load ") + kind_.what + " from '" + path_ + "': " + why + "; " + kind_.unchanged);
}

void FrameReader::read(void* out, size_t size) {
  in_.read(static_cast<char*>(out), static_cast<std::streamsize>(size));
  if (static_cast<size_t>(in_.gcount()) != size) corrupt("a read came up short (the file changed while read?)");
}

FrameReader::FrameReader(const std::string& path, const FrameKind& kind) : path_(path), kind_(kind) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0)
    fail(Code::Io, "cannot open '" + path + "': " + std::strerror(errno) + "; " + kind.unchanged);
  if (S_ISDIR(info.st_mode)) corrupt("it is a directory");
  in_.open(path, std::ios::binary);
  if (!in_) fail(Code::Io, "cannot open '" + path + "': " + std::strerror(errno) + "; " + kind.unchanged);
  in_.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in_.tellg());
  in_.seekg(0);
  char magic[8] = {};
  if (size >= 8) read(magic, 8);
  if (size < 8 || std::memcmp(magic, kind.magic, 8) != 0)
    corrupt(std::string("it is not ") + kind.a_what + " saved by koila");
  if (size < kPrefix + kTrailer) corrupt("the file is truncated (" + std::to_string(size) + " bytes)");
  uint32_t format = 0, header_bytes = 0;
  read(&format, 4);
  read(&header_bytes, 4);
  read(&payload_bytes_, 8);
  if (format == 0 || format > kind.format)
    corrupt("it is in format " + std::to_string(format) + ", and this koila reads format " +
            std::to_string(kind.format) + " (saved by a newer koila?)");
  const uint64_t expected = kPrefix + uint64_t(header_bytes) + payload_bytes_ + kTrailer;
  if (payload_bytes_ > size || expected != size)
    corrupt("the file is truncated or altered: its prefix announces " + std::to_string(expected) +
            " bytes, and it has " + std::to_string(size));
  // The checksum over everything before the trailer, in blocks.
  in_.seekg(0);
  uLong crc = crc32_z(0, nullptr, 0);
  std::vector<char> block(1 << 20);
  for (uint64_t left = size - kTrailer; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, block.size()));
    read(block.data(), n);
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(block.data()), n);
    left -= n;
  }
  uint32_t stored = 0;
  read(&stored, 4);
  if (stored != static_cast<uint32_t>(crc)) corrupt("its checksum does not match: the file is corrupt");
  in_.seekg(static_cast<std::streamoff>(kPrefix));
  header_.assign(header_bytes, '\0');
  read(header_.data(), header_.size());
}

}  // namespace koila
