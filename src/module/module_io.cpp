// Loading and saving modules of either kind, their parameters, buffers and training mode
// (module.h).
#include <torch/csrc/jit/serialization/import.h>

#include <ostream>

#include "base/atomic_file.h"
#include "base/error.h"
#include "module/module.h"
#include "module/pt2_archive.h"
#include "module/pt2_program.h"

namespace koila {

namespace {

using Named = std::vector<std::pair<std::string, at::Tensor>>;

Named by_name(const LoadedModule& m, const std::vector<std::string>& names) {
  Named out;
  for (const std::string& name : names) out.emplace_back(name, module_detail::module_tensor(m.module, name));
  return out;
}

const char* mode_name(ExportedProgram::Mode mode) {
  return mode == ExportedProgram::Mode::Training ? "training" : "evaluation";
}

}  // namespace

void load_module(LoadedModule& m, const std::string& path, const c10::Device& device) {
  m.device = device;
  if (module_detail::is_pt2_archive(path)) {
    module_detail::BuiltProgram built = module_detail::load_program(path, device);
    m.module = built.module;
    m.exported = built.program;
  } else {
    try {
      m.module = torch::jit::load(path, device);
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      fail(Code::Io, "cannot load a TorchScript module or .pt2 archive from '" + path +
                         "' (missing, unreadable or corrupt): " + torch_complaint(e));
    }
  }
  // Its graphs stay as loaded (what koila_module_save writes); calls run a routed clone
  // (op_routes.h).
}

void save_module(const LoadedModule& m, const std::string& path) {
  if (m.exported) return module_detail::save_program(*m.exported, m.module, path);
  AtomicFile file(path, "the module");
  try {
    AtomicFileBuf buffer(file);
    std::ostream out(&buffer);
    m.module.save(out);
    out.flush();
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    file.fail(torch_complaint(e));  // after a failed write, the write's own error is kept
  }
  file.commit();
}

Named module_parameters(const LoadedModule& m) {
  if (m.exported) return by_name(m, m.exported->parameters);
  Named out;
  for (const auto& p : m.module.named_parameters()) out.emplace_back(p.name, p.value);
  return out;
}

Named module_buffers(const LoadedModule& m) {
  if (m.exported) return by_name(m, m.exported->buffers);
  Named out;
  for (const auto& b : m.module.named_buffers()) out.emplace_back(b.name, b.value);
  return out;
}

bool module_training(const LoadedModule& m) {
  if (m.exported && m.exported->mode != ExportedProgram::Mode::Either)
    return m.exported->mode == ExportedProgram::Mode::Training;
  return m.module.is_training();
}

void set_module_training(LoadedModule& m, bool on) {
  if (m.exported && m.exported->mode != ExportedProgram::Mode::Either) {
    const bool training = m.exported->mode == ExportedProgram::Mode::Training;
    if (on != training)
      fail(Code::Unsupported, std::string("the exported program '") + m.exported->path + "' was exported in " +
                                  mode_name(m.exported->mode) +
                                  " mode, which its operators keep (batch norm and dropout take it as a "
                                  "constant); export it again after model." +
                                  (on ? "train()" : "eval()") + " for " + (on ? "training" : "evaluation"));
    return;
  }
  set_training(m.module, on);
}

}  // namespace koila
