// The corpus benchmarks' first two arguments: the corpus directory (default: the build
// tree's) and the repeats. A bad one is a message on stderr, not an abort.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "corpus.h"

namespace bench_corpus_args {

struct CorpusArgs {
  std::vector<koila_corpus::Entry> entries;  // the manifest's models
  int repeats = 0;
};

// False (after saying why) when the repeats are not a positive integer or the corpus
// cannot be read.
inline bool parse(int argc, char** argv, int default_repeats, CorpusArgs* out) {
  const std::string dir = argc > 1 ? argv[1] : KOILA_CORPUS_DIR;
  out->repeats = argc > 2 ? std::atoi(argv[2]) : default_repeats;
  if (out->repeats < 1) {
    std::fprintf(stderr, "%s: repeats must be a positive integer, got '%s'\n", argv[0], argv[2]);
    return false;
  }
  try {
    out->entries = koila_corpus::read_manifest(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return false;
  }
  return true;
}

}  // namespace bench_corpus_args
