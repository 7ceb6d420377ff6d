// save_program: an exported program written back as a .pt2 archive that torch.export.load
// reads, with the module's current parameters and buffers. Every record but the payloads is
// copied as it was loaded; the payloads are rewritten at their files and offsets, so that
// weights that shared storage (tied weights) still do. The archive is written beside
// `path` and renamed over it once it is complete and on disk (base/atomic_file.h): a failure
// or a killed process leaves the old file.
#include <caffe2/serialize/inline_container.h>

#include <map>
#include <memory>

#include "base/atomic_file.h"
#include "base/error.h"
#include "module/pt2_archive.h"
#include "module/pt2_program.h"

namespace koila::module_detail {

at::Tensor module_tensor(const torch::jit::Module& module, const std::string& name) {
  c10::IValue v = module._ivalue();
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    const std::string part = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!v.isObject() || !v.toObject()->type()->hasAttribute(part))
      fail(Code::Internal, "the exported program's module has no '" + name + "'");
    v = v.toObject()->getAttr(part);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (!v.isTensor()) fail(Code::Internal, "the exported program's '" + name + "' is not a tensor");
  return v.toTensor();
}

namespace {

// The files of one payload directory, rebuilt from the module's tensors over the bytes they
// had (parts of a file no tensor covers keep theirs).
std::map<std::string, std::string> payload_files(const std::vector<Pt2Payload>& payloads,
                                                 const torch::jit::Module& module,
                                                 caffe2::serialize::PyTorchStreamReader* original,
                                                 const std::string& dir) {
  std::map<std::string, at::Tensor> files;
  for (const Pt2Payload& p : payloads) {
    auto found = files.find(p.file);
    if (found == files.end()) {
      at::Tensor flat;
      if (original && original->hasRecord(dir + p.file)) {
        auto [data, size] = original->getRecord(dir + p.file);
        flat = at::empty({static_cast<int64_t>(size / c10::elementSize(p.dtype))}, at::TensorOptions().dtype(p.dtype));
        if (size) std::memcpy(flat.data_ptr(), data.get(), flat.numel() * c10::elementSize(p.dtype));
      } else {
        flat = at::zeros({0}, at::TensorOptions().dtype(p.dtype));
      }
      found = files.emplace(p.file, flat).first;
    }
    const int64_t last = p.last();
    if (last < 0) continue;
    at::Tensor& flat = found->second;
    if (last >= flat.numel()) {  // the original file is gone or shorter: grow it
      at::Tensor grown = at::zeros({last + 1}, flat.options());
      grown.narrow(0, 0, flat.numel()).copy_(flat);
      flat = grown;
    }
    const at::Tensor current = module_tensor(module, p.name);
    c10::NoGradGuard no_grad;
    flat.as_strided(p.sizes, p.strides, p.offset).copy_(current.detach().to(at::kCPU));
  }
  std::map<std::string, std::string> out;
  for (const auto& [file, flat] : files)
    out[file] = std::string(static_cast<const char*>(flat.data_ptr()), flat.numel() * flat.element_size());
  return out;
}

}  // namespace

void save_program(const ExportedProgram& program, const torch::jit::Module& module, const std::string& path) {
  const Pt2Archive& a = *program.archive;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> original;
  try {
    original = std::make_unique<caffe2::serialize::PyTorchStreamReader>(a.path);
  } catch (const std::exception&) {
    original.reset();  // moved or deleted since it was loaded: what koila kept is enough
  }
  const std::string weights_dir = "data/weights/", constants_dir = "data/constants/";
  const std::string weights_config = weights_dir + a.model + "_weights_config.json";
  const std::string constants_config = constants_dir + a.model + "_constants_config.json";
  std::map<std::string, std::string> records;
  for (const auto& [file, bytes] : payload_files(a.weights, module, original.get(), weights_dir))
    records[weights_dir + file] = bytes;
  for (const auto& [file, bytes] : payload_files(a.constants, module, original.get(), constants_dir))
    records[constants_dir + file] = bytes;
  records[weights_config] = a.weights_config.dump();
  if (!a.constants_config.is_null()) records[constants_config] = a.constants_config.dump();
  records["models/" + a.model + ".json"] = a.program.dump();
  records["archive_format"] = "pt2";
  records["archive_version"] = "0";
  records["byteorder"] = "little";
  if (original)
    for (const std::string& r : a.records) {
      if (records.count(r) || r.rfind(".data/", 0) == 0) continue;
      if (r.rfind(weights_dir, 0) == 0 || r.rfind(constants_dir, 0) == 0) continue;  // payloads: rewritten
      try {
        auto [data, size] = original->getRecord(r);
        records[r] = std::string(static_cast<const char*>(data.get()), size);
      } catch (const std::exception&) {
        // An optional record (sample inputs, extra files) that cannot be read: left out.
      }
    }

  AtomicFile file(path, "the exported program");
  try {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      // All of it, also after a failed write: the writer throws from its destructor
      // (std::terminate) when a write comes up short. commit() reports the failure.
      file.write(data, size);
      return size;
    });
    writer.setMinVersion(6);
    for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
    writer.writeEndOfFile();
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    file.fail(torch_complaint(e));  // after a failed write, the write's own error is kept
  }
  file.commit();
}

}  // namespace koila::module_detail
