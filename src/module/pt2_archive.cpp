#include "module/pt2_archive.h"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <utility>

#include "base/error.h"
#include "base/text.h"

namespace koila::module_detail {

namespace {

using Json = nlohmann::ordered_json;
using caffe2::serialize::PyTorchStreamReader;

constexpr const char* kWeightsDir = "data/weights/";
constexpr const char* kConstantsDir = "data/constants/";

// The archive, opened; what the zip reader throws (not a zip, truncated, corrupt) is an IO
// error naming the file.
std::unique_ptr<PyTorchStreamReader> open_zip(const std::string& path) {
  try {
    return std::make_unique<PyTorchStreamReader>(path);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    fail(Code::Io, "cannot read '" + path + "' as a zip archive (truncated or corrupt?): " + torch_complaint(e));
  }
}

std::string read_record(PyTorchStreamReader& zip, const std::string& path, const std::string& name) {
  try {
    if (!zip.hasRecord(name)) fail(Code::Io, "'" + path + "' has no record '" + name + "'");
    auto [data, size] = zip.getRecord(name);
    return std::string(static_cast<const char*>(data.get()), size);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    fail(Code::Io,
         "cannot read record '" + name + "' of '" + path + "' (truncated or corrupt?): " + torch_complaint(e));
  }
}

Json parse_json(const std::string& text, const std::string& path, const std::string& name) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    fail(Code::Io, "record '" + name + "' of '" + path + "' is not valid JSON (corrupt?): " + e.what());
  }
}

// Trailing whitespace off a short text record ("pt2\n" reads as "pt2").
std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// A field of a JSON object, or an IO error naming what is missing.
const Json& field(const Json& j, const char* key, const std::string& what) {
  if (!j.is_object() || !j.contains(key)) fail(Code::Io, what + " has no '" + key + "' (corrupt archive?)");
  return j.at(key);
}

int64_t concrete_int(const Json& sym, const std::string& what) {
  if (sym.is_object() && sym.contains("as_int") && sym.at("as_int").is_number_integer())
    return sym.at("as_int").get<int64_t>();
  fail(Code::Unsupported, what + " is symbolic; koila reads weights of concrete sizes only");
}

std::vector<int64_t> concrete_ints(const Json& list, const std::string& what) {
  if (!list.is_array()) fail(Code::Io, what + " is not a list (corrupt archive?)");
  std::vector<int64_t> out;
  for (const Json& s : list) out.push_back(concrete_int(s, what));
  return out;
}

// The payloads of one config (weights or constants): each file read once, each payload a
// view of its file as its tensor_meta says.
std::vector<Pt2Payload> read_payloads(PyTorchStreamReader& zip, const std::string& path, const Json& config,
                                      const std::string& dir) {
  std::vector<Pt2Payload> out;
  std::map<std::string, at::Tensor> files;
  const Json& entries = field(config, "config", dir + "'s payload config");
  if (!entries.is_object()) fail(Code::Io, dir + "'s payload config is not an object (corrupt archive?)");
  for (const auto& [name, meta] : entries.items()) {
    const std::string what = "'" + name + "' in '" + path + "'";
    if (field(meta, "use_pickle", what).get<bool>())
      fail(Code::Unsupported, what +
                                  " is stored pickled (a tensor subclass or custom object), which koila "
                                  "cannot read");
    const Json& tm = field(meta, "tensor_meta", what);
    if (tm.is_null()) fail(Code::Unsupported, what + " is not a tensor");
    Pt2Payload p;
    p.name = name;
    p.file = field(meta, "path_name", what).get<std::string>();
    p.dtype = pt2_dtype(field(tm, "dtype", what).get<int>(), what);
    if (field(tm, "layout", what).get<int>() != 7) fail(Code::Unsupported, what + " is not a strided (dense) tensor");
    p.sizes = concrete_ints(field(tm, "sizes", what), what + "'s size");
    p.strides = concrete_ints(field(tm, "strides", what), what + "'s stride");
    p.offset = concrete_int(field(tm, "storage_offset", what), what + "'s storage offset");
    if (p.sizes.size() != p.strides.size()) fail(Code::Io, what + " has sizes and strides of different ranks");
    for (size_t d = 0; d < p.sizes.size(); ++d)
      if (p.sizes[d] < 0 || p.strides[d] < 0) fail(Code::Io, what + " has a negative size or stride (corrupt?)");
    auto found = files.find(p.file);
    if (found == files.end()) {
      const std::string bytes = read_record(zip, path, dir + p.file);
      const int64_t element = static_cast<int64_t>(c10::elementSize(p.dtype));
      if (static_cast<int64_t>(bytes.size()) % element != 0)
        fail(Code::Io, "record '" + dir + p.file + "' of '" + path + "' holds " + std::to_string(bytes.size()) +
                           " bytes, not a whole number of " + dtype_name(p.dtype) + " elements (corrupt?)");
      at::Tensor flat = at::empty({static_cast<int64_t>(bytes.size()) / element}, at::TensorOptions().dtype(p.dtype));
      if (!bytes.empty()) std::memcpy(flat.data_ptr(), bytes.data(), bytes.size());
      found = files.emplace(p.file, flat).first;
    }
    const at::Tensor& flat = found->second;
    const int64_t last = p.last();
    if (last < 0 || flat.numel() == 0) {  // a record without bytes loads as zeros, as PyTorch loads it
      p.value = at::zeros(p.sizes, at::TensorOptions().dtype(p.dtype));
    } else {
      if (p.offset < 0 || last >= flat.numel())
        fail(Code::Io, what + " reaches past the end of its record '" + dir + p.file + "' (truncated or corrupt?)");
      p.value = flat.as_strided(p.sizes, p.strides, p.offset);
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

at::ScalarType pt2_dtype(int code, const std::string& what) {
  switch (code) {
    case 1: return at::kByte;
    case 2: return at::kChar;
    case 3: return at::kShort;
    case 4: return at::kInt;
    case 5: return at::kLong;
    case 6: return at::kHalf;
    case 7: return at::kFloat;
    case 8: return at::kDouble;
    case 9: return at::kComplexHalf;
    case 10: return at::kComplexFloat;
    case 11: return at::kComplexDouble;
    case 12: return at::kBool;
    case 13: return at::kBFloat16;
    default:
      fail(Code::Unsupported, what + " has dtype code " + std::to_string(code) +
                                  " (an unsigned or 8-bit float type, or unknown), which koila does not support");
  }
}

int64_t Pt2Payload::last() const {
  int64_t last = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return -1;
    last += (sizes[d] - 1) * strides[d];
  }
  return last;
}

bool is_pt2_archive(const std::string& path) {
  try {
    PyTorchStreamReader zip(path);
    if (!zip.hasRecord("archive_format")) return false;
    auto [data, size] = zip.getRecord("archive_format");
    return trimmed(std::string(static_cast<const char*>(data.get()), size)) == "pt2";
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception&) {
    return false;
  }
}

Pt2Archive read_pt2_archive(const std::string& path) {
  std::unique_ptr<PyTorchStreamReader> zip = open_zip(path);
  Pt2Archive a;
  a.path = path;
  const std::string format = trimmed(read_record(*zip, path, "archive_format"));
  if (format != "pt2") fail(Code::Unsupported, "'" + path + "' is an archive of format '" + format + "', not pt2");
  const std::string version =
      zip->hasRecord("archive_version") ? trimmed(read_record(*zip, path, "archive_version")) : std::string("0");
  if (version != "0")
    fail(Code::Unsupported, "'" + path + "' is a pt2 archive of version " + version + "; koila reads version 0");
  if (zip->hasRecord("byteorder")) {
    const std::string order = trimmed(read_record(*zip, path, "byteorder"));
    if (order != "little")
      fail(Code::Unsupported, "'" + path + "' stores its weights " + order + "-endian; koila reads little-endian");
  }
  try {
    a.records = zip->getAllRecords();
  } catch (const std::exception& e) {
    fail(Code::Io, "cannot list the records of '" + path + "': " + torch_complaint(e));
  }
  std::vector<std::string> models;
  for (const std::string& r : a.records) {
    const std::string prefix = "models/", suffix = ".json";
    if (r.rfind(prefix, 0) == 0 && r.size() > prefix.size() + suffix.size() &&
        r.compare(r.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        r.find('/', prefix.size()) == std::string::npos)
      models.push_back(r.substr(prefix.size(), r.size() - prefix.size() - suffix.size()));
  }
  if (models.empty()) {
    const bool aoti = std::any_of(a.records.begin(), a.records.end(),
                                  [](const std::string& r) { return r.rfind("data/aotinductor/", 0) == 0; });
    fail(aoti ? Code::Unsupported : Code::Io,
         "'" + path + "' holds no exported program (models/*.json)" +
             (aoti ? std::string(": it is an AOTInductor package (compiled for inference), which koila cannot train; "
                                 "save the program itself with torch.export.save")
                   : std::string(" (corrupt?)")));
  }
  if (models.size() > 1 && std::find(models.begin(), models.end(), "model") == models.end())
    fail(Code::Unsupported, "'" + path + "' holds " + std::to_string(models.size()) +
                                " exported programs and none is named 'model'; koila loads one program");
  a.model = models.size() == 1 ? models[0] : "model";
  a.program = parse_json(read_record(*zip, path, "models/" + a.model + ".json"), path, "models/" + a.model + ".json");

  const Json& schema = field(a.program, "schema_version", "the program");
  const int major = field(schema, "major", "schema_version").get<int>();
  const int minor = field(schema, "minor", "schema_version").get<int>();
  if (major != 8)
    fail(Code::Unsupported, "'" + path + "' holds a program of schema version " + std::to_string(major) + "." +
                                std::to_string(minor) + " (torch " +
                                a.program.value("torch_version", std::string("unknown")) +
                                "); koila reads schema version 8 (PyTorch 2.3 to 2.14 and later 2.x)");

  const std::string legacy = std::string(kWeightsDir) + a.model + ".pt";
  if (zip->hasRecord(legacy))
    fail(Code::Unsupported, "'" + path + "' stores its weights pickled (" + legacy +
                                ", PyTorch 2.6 or older); save the program again with torch.export.save from "
                                "PyTorch 2.7 or newer");
  const std::string weights = std::string(kWeightsDir) + a.model + "_weights_config.json";
  const std::string constants = std::string(kConstantsDir) + a.model + "_constants_config.json";
  a.weights_config = parse_json(read_record(*zip, path, weights), path, weights);
  a.weights = read_payloads(*zip, path, a.weights_config, kWeightsDir);
  if (zip->hasRecord(constants)) {
    a.constants_config = parse_json(read_record(*zip, path, constants), path, constants);
    a.constants = read_payloads(*zip, path, a.constants_config, kConstantsDir);
  }
  return a;
}

}  // namespace koila::module_detail
