// A temporary folder for a test's files, removed with everything in it when the test ends.
// POSIX calls rather than std::filesystem: PyTorch 2.11's wheels export their own copies of
// libstdc++'s std::filesystem functions from libtorch.so, and a test binary linked against
// them binds its calls there and crashes (std::filesystem::remove_all jumped to address 0:
// found on the GPU machine's torch 2.11.0+cu130, reproduced here with the same wheel).
#pragma once

#include <ftw.h>
#include <stdlib.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace koila_tests {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() { remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // `name` inside the folder.
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

  // Removes `path` and, for a folder, everything in it; quietly does nothing where it is
  // absent.
  static void remove_all(const std::string& path) {
    nftw(
        path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }

 private:
  std::string path_;
};

}  // namespace koila_tests
