#include "base/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace koila {

namespace {

constexpr size_t kBufferBytes = size_t{1} << 16;

std::atomic<unsigned> temporaries{0};

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The prefix of the temporaries of `path`'s saves: ".NAME.koila-".
std::string temporary_prefix(const std::string& path) { return "." + name_of(path) + ".koila-"; }

// Removes the temporaries that saves of `path` left when their process was killed (their
// PID no longer runs). Best effort: a folder that cannot be read is left as it is.
void remove_stale_temporaries(const std::string& path) {
  const std::string folder = folder_of(path), prefix = temporary_prefix(path);
  DIR* dir = ::opendir(folder.c_str());
  if (!dir) return;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0 || name.size() < prefix.size() + 4 ||
        name.compare(name.size() - 4, 4, ".tmp") != 0)
      continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || end == name.c_str() + prefix.size() || *end != '-') continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to know
    (void)::unlink((folder + "/" + name).c_str());
  }
  ::closedir(dir);
}

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  if (path_.empty() || path_.back() == '/')
    koila::fail(Code::Io, "cannot save " + what_ + " to '" + path_ + "': not a file name");
  struct stat info {};
  if (::stat(path_.c_str(), &info) == 0 && S_ISDIR(info.st_mode))
    koila::fail(Code::Io, "cannot save " + what_ + " to '" + path_ + "': it is a directory");
  remove_stale_temporaries(path_);
  const std::string folder = folder_of(path_);
  temp_ = folder + "/" + temporary_prefix(path_) + std::to_string(::getpid()) + "-" +
          std::to_string(temporaries.fetch_add(1)) + ".tmp";
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int e = errno;
    koila::fail(Code::Io, "cannot save " + what_ + " to '" + path_ + "': cannot create a file in '" + folder +
                              "': " + std::strerror(e));
  }
  buffer_.reserve(kBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) (void)::unlink(temp_.c_str());
}

void AtomicFile::write_all(const char* p, size_t left) {
  while (left > 0 && error_.empty()) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // EFBIG (a file size limit, with SIGXFSZ ignored), ENOSPC, EIO, EDQUOT...
      error_ = n < 0 ? std::strerror(errno) : "the write made no progress";
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFile::flush_buffer() {
  write_all(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::write(const void* data, size_t size) {
  if (!error_.empty()) return;
  const char* bytes = static_cast<const char*>(data);
  if (buffer_.size() + size > kBufferBytes) flush_buffer();
  if (size >= kBufferBytes)
    write_all(bytes, size);  // large blocks (tensor payloads) go straight to the file
  else
    buffer_.insert(buffer_.end(), bytes, bytes + size);
}

void AtomicFile::fail(const std::string& why) {
  if (error_.empty()) error_ = why.empty() ? "failed" : why;
}

void AtomicFile::commit() {
  if (error_.empty()) flush_buffer();
  if (error_.empty() && ::fsync(fd_) != 0) error_ = std::string("cannot flush it to disk: ") + std::strerror(errno);
  if (::close(fd_) != 0 && error_.empty()) error_ = std::strerror(errno);
  fd_ = -1;
  if (error_.empty() && ::rename(temp_.c_str(), path_.c_str()) != 0) error_ = std::strerror(errno);
  if (!error_.empty())
    koila::fail(Code::Io, "cannot save " + what_ + " to '" + path_ + "': " + error_ + " (the file there is as it was)");
  committed_ = true;
  // The rename itself on disk: without this a power cut could bring the old name back.
  const int dir = ::open(folder_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

// Both report every byte as written, also after a failure: LibTorch's archive writer
// (PyTorchStreamWriter) finishes its archive in its destructor and throws there when a write
// came up short, which ends the process (std::terminate). The failure is kept in the file,
// and commit() reports it.
AtomicFileBuf::int_type AtomicFileBuf::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  const char ch = traits_type::to_char_type(c);
  file_.write(&ch, 1);
  return c;
}

std::streamsize AtomicFileBuf::xsputn(const char* s, std::streamsize n) {
  file_.write(s, static_cast<size_t>(n));
  return n;
}

}  // namespace koila
