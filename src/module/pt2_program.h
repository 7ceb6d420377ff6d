// Internal to module/ (only src/module/*.cpp include it; not part of koila's interface): an
// exported program read from its archive (pt2_archive.h) made into the TorchScript module
// koila runs (exported.h says why), and written back as an archive.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <string>

#include "module/exported.h"

namespace koila::module_detail {

struct BuiltProgram {
  torch::jit::Module module;
  std::shared_ptr<ExportedProgram> program;
};

// The program in the .pt2 archive at `path`, its tensors on `device`. Fails with
// Code::Io (unreadable, truncated or corrupt) or Code::Unsupported (a format,
// version, operator or construct koila does not run, named).
BuiltProgram load_program(const std::string& path, const c10::Device& device);

// The tensor of the program's module at dotted `name` ("bn.running_mean"), as its
// attributes hold it (Code::Internal where there is none).
at::Tensor module_tensor(const torch::jit::Module& module, const std::string& name);

// Writes `program` to `path` as a .pt2 archive with `module`'s current parameters and
// buffers, for torch.export.load: the program as it was loaded, its payloads rewritten.
void save_program(const ExportedProgram& program, const torch::jit::Module& module, const std::string& path);

}  // namespace koila::module_detail
