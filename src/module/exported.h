// Programs saved by torch.export.save (PyTorch 2.x .pt2 archives) as modules koila runs. The
// program's graph of ATen operators becomes the forward method of a TorchScript module built
// for it (module/pt2_program.cpp): each node calls its operator by name and exact overload
// through the c10 dispatcher, with autograd, as the TorchScript interpreter calls any
// operator; parameters, buffers and constants are that module's attributes under their
// dotted names. So an exported program's call is a module call like any other (meta runs,
// the batch dim, the sample-mixing probe, estimates, chunks, batch statistics).
//
// What the module cannot say of itself is kept here: the training mode baked in at export,
// names and order of parameters and buffers as PyTorch lists them, the program's inputs and
// which of their dims are symbolic, and what saving it again needs.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace koila {

namespace module_detail {
struct Pt2Archive;  // module/pt2_archive.h
}

struct ExportedProgram {
  std::string path;  // the archive it was loaded from
  // The mode its operators were exported in: batch norm and dropout take it as a constant.
  enum class Mode { Training, Evaluation, Either };  // Either: no operator depends on it
  Mode mode = Mode::Either;
  std::vector<std::string> parameters;  // named_parameters() order, as the program lists them
  std::vector<std::string> buffers;     // named_buffers() order (persistent or not)
  struct Input {
    std::string name;
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> sizes;  // -1 where the dim is symbolic
  };
  std::vector<Input> inputs;  // the user inputs, in order
  // What koila_module_save writes again (the program, its payload configs, its other records).
  std::shared_ptr<const module_detail::Pt2Archive> archive;
};

}  // namespace koila
