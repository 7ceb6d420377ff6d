// Internal to module/ (only src/module/*.cpp include it; not part of koila's interface):
// reading the .pt2 archive that torch.export.save writes (PyTorch 2.x): a zip (LibTorch's
// own reader, PyTorchStreamReader) holding the program as JSON (models/model.json, read
// with nlohmann::json) and its weights and constants as raw bytes, each described by a
// payload config (data/weights/model_weights_config.json and data/constants/...).
//
// Known: archive format "pt2", archive version 0, program schema major version 8 (any
// minor version: a minor bump is a compatible change). Anything else is
// Code::Unsupported naming it; a file that is not such a zip, or one truncated or
// corrupt, is Code::Io.
#pragma once

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace koila::module_detail {

// One tensor the archive holds: a parameter, a buffer or a constant, by its dotted name, and
// where it lies: a view of a file of its payload directory.
struct Pt2Payload {
  std::string name;
  std::string file;  // "weight_0"
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  at::Tensor value;  // on the CPU, sharing storage with the payloads of the same file

  // The last element of its file the view reaches; -1 for a view of no element.
  int64_t last() const;
};

struct Pt2Archive {
  std::string path;
  std::string model;                                        // the program's name inside the archive ("model")
  nlohmann::ordered_json program;                           // models/<model>.json (key order kept)
  nlohmann::ordered_json weights_config, constants_config;  // the payload configs as stored
  std::vector<Pt2Payload> weights, constants;               // in the configs' order
  std::vector<std::string> records;                         // every record's name, for saving again
};

// Whether `path` is a .pt2 archive (a zip whose archive_format record says "pt2"); the
// content decides, not the name. False for any other file, also one that cannot be read.
bool is_pt2_archive(const std::string& path);

// Reads the archive at `path` (see above for what fails how).
Pt2Archive read_pt2_archive(const std::string& path);

// The ATen dtype of the program format's dtype code (schema.py's ScalarType), or fails with
// Code::Unsupported naming it; `what` says where it was found.
at::ScalarType pt2_dtype(int code, const std::string& what);

}  // namespace koila::module_detail
