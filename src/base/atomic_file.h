// Files written whole or not at all (koila_module_save, and the optimizer state of issue 29).
// The bytes go to a temporary file beside the target, which is flushed to disk, renamed over
// the target, and the folder flushed: a process killed at any moment leaves the old file or
// the new one, complete, and at worst a temporary (".NAME.koila-PID-N.tmp") that the next
// save of the same target removes once its process is gone. A failure (a write error, a
// full disk, a file size limit) is Code::Io naming the target, with the temporary
// removed and the target as it was.
#pragma once

#include <cstddef>
#include <streambuf>
#include <string>
#include <vector>

namespace koila {

class AtomicFile {
 public:
  // Creates the temporary beside `path`; `what` names what is saved in messages ("the
  // module"). Throws Code::Io when the folder cannot take it.
  AtomicFile(std::string path, std::string what);
  ~AtomicFile();  // removes the temporary unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes (buffered; large blocks straight to the file). After a failure the error
  // is kept for commit(), and later writes do nothing.
  void write(const void* data, size_t size);
  // A failure the caller met while producing the bytes (a serializer's exception): commit()
  // reports it.
  void fail(const std::string& why);
  // Flushes the temporary to disk and renames it over the target, then flushes the folder.
  // Throws Code::Io after any failure, the temporary removed and the target untouched.
  void commit();

 private:
  void write_all(const char* p, size_t size);  // until done or failed (error_)
  void flush_buffer();

  std::string path_, what_, temp_;
  int fd_ = -1;
  std::vector<char> buffer_;
  std::string error_;  // non-empty: a write or the caller failed
  bool committed_ = false;
};

// A std::streambuf over an AtomicFile, for serializers that write to a std::ostream. It takes
// every byte, also after a failed write (kept for commit()): serializers that fail in their
// destructors when a write comes up short (LibTorch's archive writer) never see one.
class AtomicFileBuf : public std::streambuf {
 public:
  explicit AtomicFileBuf(AtomicFile& file) : file_(file) {}

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;

 private:
  AtomicFile& file_;
};

}  // namespace koila
