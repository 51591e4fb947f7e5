// Hugging Face folders read and written through an architecture's table (train/hf_architecture.h):
// the config, the weight files (one or sharded), the names, dtypes, shapes and layouts.
#include "train/hf_checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "kernels/quantized.h"
#include "modules/fp8_state.h"
#include "runtime/error.h"
#include "runtime/text_file.h"
#include "train/hf_architecture.h"

namespace octet::train {
namespace fs = std::filesystem;

namespace detail {

int64_t positive_int_key(const nlohmann::json& config, const char* key, const std::string& where) {
  OCTET_CHECK(config.contains(key), where, ": no \"", key, "\" (expected a positive integer)");
  const nlohmann::json& v = config[key];
  OCTET_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, where, ": \"", key, "\" is ", v.dump(),
              ", expected a positive integer");
  return v.get<int64_t>();
}

bool bool_key(const nlohmann::json& config, const char* key, bool fallback,
              const std::string& where) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  OCTET_CHECK(config[key].is_boolean(), where, ": \"", key, "\" is ", config[key].dump(),
              ", expected true or false");
  return config[key].get<bool>();
}

}  // namespace detail

namespace {

using detail::HfArchitecture;
using detail::HfLayout;
using detail::HfPart;
using detail::HfTensor;
using Json = nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

const HfArchitecture* const kArchitectures[] = {&detail::gpt2_architecture(),
                                                &detail::llama_architecture()};

std::string known_architectures() {
  std::string names;
  for (const HfArchitecture* a : kArchitectures) {
    names += (names.empty() ? "" : ", ") + std::string(a->name);
  }
  return names;
}

Json read_json(const fs::path& path, const std::string& what) {
  const std::string text = read_file_text(path.string(), what);
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    OCTET_FAIL(what, " ", path.string(), " is not valid JSON: ", json_error_text(e.what()));
  }
}

// The architecture config.json names: its "architectures" list, else its "model_type".
const HfArchitecture& find_architecture(const Json& config, const std::string& where) {
  if (config.contains("architectures") && !config["architectures"].is_null()) {
    const Json& list = config["architectures"];
    OCTET_CHECK(list.is_array() && !list.empty(), where, ": \"architectures\" is ", list.dump(),
                ", expected a list of architecture names");
    for (const Json& name : list) {
      for (const HfArchitecture* a : kArchitectures) {
        if (name.is_string() && name.get<std::string>() == a->name) return *a;
      }
    }
    OCTET_FAIL(where, ": architecture ", list.dump(), " is not one octet imports (",
               known_architectures(), ")");
  }
  OCTET_CHECK(config.contains("model_type") && config["model_type"].is_string(), where,
              ": neither \"architectures\" nor \"model_type\" says what model this is (octet "
              "imports ",
              known_architectures(), ")");
  const std::string type = config["model_type"].get<std::string>();
  for (const HfArchitecture* a : kArchitectures) {
    if (type == a->model_type) return *a;
  }
  OCTET_FAIL(where, ": model_type \"", printable(type), "\" is not one octet imports (",
             known_architectures(), ")");
}

std::optional<int64_t> token_id(const Json& config, const char* key) {
  if (!config.contains(key) || !config[key].is_number_integer()) return std::nullopt;
  return config[key].get<int64_t>();
}

// A tensor as the folder holds it: its file, and its name as written there.
struct Stored {
  Tensor tensor;
  std::string file;
  std::string full_name;
};

// The weight files of `folder`: model.safetensors, else the shards its index lists (each listed
// file must exist, and each shard must hold exactly the tensors the index gives it).
std::vector<SafetensorsFile> read_weight_files(const fs::path& folder) {
  if (fs::exists(folder / kWeightsFile))
    return {load_safetensors((folder / kWeightsFile).string())};
  const fs::path index_path = folder / kIndexFile;
  OCTET_CHECK(fs::exists(index_path), "no ", kWeightsFile, " or ", kIndexFile, " in ",
              folder.string(), " (octet reads safetensors weights only)");
  const Json index = read_json(index_path, "index file");
  const std::string where = "index file " + index_path.string();
  OCTET_CHECK(index.is_object() && index.contains("weight_map") &&
                  index["weight_map"].is_object() && !index["weight_map"].empty(),
              where, ": expected an object with a non-empty \"weight_map\" of tensor -> file");
  std::map<std::string, std::set<std::string>> listed;  // file -> tensors
  for (const auto& [name, file] : index["weight_map"].items()) {
    OCTET_CHECK(file.is_string(), where, ": tensor \"", name, "\" maps to ", file.dump(),
                ", expected a file name");
    const std::string f = file.get<std::string>();
    OCTET_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", where,
                ": tensor \"", name, "\" maps to \"", printable(f),
                "\", expected a file name in the folder");
    OCTET_CHECK(fs::exists(folder / f), where, " names ", f, " (for tensor \"", name,
                "\"), which is not in ", folder.string());
    listed[f].insert(name);
  }
  std::vector<SafetensorsFile> files;
  for (const auto& [file, names] : listed) {
    files.push_back(load_safetensors((folder / file).string()));
    std::set<std::string> held;
    for (const auto& [name, t] : files.back().tensors) {
      OCTET_CHECK(names.count(name) == 1, "shard ", (folder / file).string(), " holds tensor \"",
                  name, "\", which ", where, " does not list for it");
      held.insert(name);
    }
    for (const std::string& name : names) {
      OCTET_CHECK(held.count(name) == 1, where, " lists tensor \"", name, "\" in ", file,
                  ", which does not hold it");
    }
  }
  return files;
}

// Every tensor of the folder by its name without the architecture's prefix.
std::map<std::string, Stored> read_tensors(const fs::path& folder, const HfArchitecture& arch) {
  std::map<std::string, Stored> out;
  for (SafetensorsFile& file : read_weight_files(folder)) {
    for (auto& [name, tensor] : file.tensors) {
      std::string key = name;
      if (key.starts_with(arch.prefix)) key.erase(0, arch.prefix.size());
      const auto [it, inserted] = out.emplace(key, Stored{std::move(tensor), file.path, name});
      OCTET_CHECK(inserted, "tensor \"", name, "\" in ", file.path, " and \"", it->second.full_name,
                  "\" in ", it->second.file, " are the same tensor (with and without the prefix \"",
                  arch.prefix, "\")");
    }
  }
  return out;
}

std::string where_is(const Stored& s) { return "tensor \"" + s.full_name + "\" in " + s.file; }

// The tensor's values as f32, after checking its dtype and its shape against the config.
Tensor part_values(const Stored& s, const HfPart& part) {
  const DType dtype = s.tensor.dtype();
  OCTET_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16, where_is(s),
              " is ", safetensors_dtype_name(dtype), "; expected F32, BF16 or F16");
  OCTET_CHECK(s.tensor.shape() == part.shape, where_is(s), " has shape ",
              shape_str(s.tensor.shape()), ", but config.json (", part.shape_keys, ") says ",
              shape_str(part.shape));
  Tensor f32 = dtype == DType::kF32 ? s.tensor : ops::cast(s.tensor, DType::kF32);
  return part.layout == HfLayout::kTransposed ? ops::transpose_2d(f32) : f32;
}

// Parts stacked along dimension 0 into one (rows, ...) tensor of `shape`.
Tensor stack_rows(const std::vector<Tensor>& parts, const Shape& shape) {
  if (parts.size() == 1) return parts.front().reshape(shape);
  Tensor out = Tensor::empty(shape, DType::kF32);
  auto* dst = static_cast<uint8_t*>(out.data());
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.data(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

// The name a file holds for `name`: with the prefix, except the LM head's, which never has it.
std::string full_name(const HfArchitecture& arch, std::string_view prefix,
                      const std::string& name) {
  return name == arch.head ? name : std::string(prefix) + name;
}

// A head stored beside a tied embedding must equal it.
void check_tied_head(const std::map<std::string, Stored>& stored, const HfArchitecture& arch,
                     const std::string& folder) {
  const auto head = stored.find(std::string(arch.head));
  if (head == stored.end()) return;
  const auto embedding = stored.find(std::string(arch.embedding));
  OCTET_CHECK(embedding != stored.end(), "Hugging Face folder ", folder, ": missing tensor \"",
              arch.prefix, arch.embedding, "\"");
  const auto values = [](const Tensor& t) {
    return t.dtype() == DType::kF32 ? t.to_floats() : ops::cast(t, DType::kF32).to_floats();
  };
  OCTET_CHECK(head->second.tensor.shape() == embedding->second.tensor.shape() &&
                  values(head->second.tensor) == values(embedding->second.tensor),
              where_is(head->second), " differs from \"", embedding->second.full_name,
              "\": an untied LM head, but config.json ties it to the token embedding (", arch.name,
              " with tie_word_embeddings true)");
}

}  // namespace

HfModel import_hf(const std::string& folder) {
  return with_error_context("Hugging Face folder " + folder, [&] {
    OCTET_CHECK(fs::is_directory(folder), "Hugging Face folder ", folder, " is not a directory");
    const fs::path config_path = fs::path(folder) / kConfigFile;
    const Json config = read_json(config_path, "config file");
    const std::string where = config_path.string();
    OCTET_CHECK(config.is_object(), where, " is not a JSON object");
    const HfArchitecture& arch = find_architecture(config, where);
    HfModel m;
    m.architecture = arch.name;
    m.config = arch.read_config(config, where);
    m.bos_token_id = token_id(config, "bos_token_id");
    m.eos_token_id = token_id(config, "eos_token_id");

    std::map<std::string, Stored> stored = read_tensors(folder, arch);
    // Missing tensors are named as this folder names its others.
    bool prefixed = false;
    for (const auto& [name, s] : stored) prefixed = prefixed || s.full_name != name;
    const std::string_view prefix = prefixed ? arch.prefix : std::string_view();
    const std::vector<HfTensor> expected = arch.tensors(m.config);
    std::set<std::string> known = {std::string(arch.head)};
    for (const HfTensor& t : expected) {
      for (const HfPart& p : t.parts) known.insert(p.name);
    }
    for (const auto& [name, s] : stored) {
      OCTET_CHECK(known.count(name) == 1 || arch.is_buffer(name), "Hugging Face folder ", folder,
                  ": unexpected ", where_is(s), " (", arch.name, " with ", m.config.n_layer,
                  " layers has no such parameter)");
    }
    if (m.config.tie_embeddings == modules::TieEmbeddings::kYes) {
      check_tied_head(stored, arch, folder);
    }
    for (const HfTensor& t : expected) {
      std::vector<Tensor> parts;
      for (const HfPart& p : t.parts) {
        const auto it = stored.find(p.name);
        OCTET_CHECK(it != stored.end(), "Hugging Face folder ", folder, ": missing tensor \"",
                    full_name(arch, prefix, p.name), "\" (", shape_str(p.shape),
                    ", for config.json's ", p.shape_keys, ", ", m.config.n_layer, " layers)");
        parts.push_back(part_values(it->second, p));
      }
      m.weights.emplace_back(t.octet_name, stack_rows(parts, t.shape));
    }
    return m;
  });
}

namespace {

// A folder made beside the target and renamed into place when complete; removed otherwise.
class TemporaryFolder {
 public:
  explicit TemporaryFolder(const fs::path& target)
      : path_(target.string() + ".tmp." + std::to_string(::getpid())) {
    std::error_code ec;
    fs::remove_all(path_, ec);  // left by a process with this pid that was killed
    OCTET_CHECK(fs::create_directory(path_, ec) && !ec, "cannot create ", path_.string(), ": ",
                ec.message());
  }
  ~TemporaryFolder() {
    std::error_code ec;
    if (!committed_) fs::remove_all(path_, ec);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  const fs::path& path() const { return path_; }
  void commit(const fs::path& target) {
    std::error_code ec;
    fs::rename(path_, target, ec);
    OCTET_CHECK(!ec, "cannot move ", path_.string(), " into place as ", target.string(), ": ",
                ec.message());
    committed_ = true;
  }

 private:
  fs::path path_;
  bool committed_ = false;
};

// The model's parameters must be the architecture's, shape for shape: a model built with options
// the architecture's config keys cannot hold (an LM head of its own, rotary positions,
// grouped-query attention) is refused before anything is written.
void check_exportable(const std::map<std::string, Tensor>& values,
                      const std::vector<HfTensor>& tensors, const HfArchitecture& arch) {
  std::set<std::string> expected;
  for (const HfTensor& t : tensors) {
    expected.insert(t.octet_name);
    const auto it = values.find(t.octet_name);
    OCTET_CHECK(it != values.end(), "cannot export to ", arch.name,
                ": the model has no parameter \"", t.octet_name, "\"",
                t.octet_name == "wpe.weight"
                    ? " (learned positions: config key model.arch must be gpt2)"
                    : "");
    OCTET_CHECK(
        it->second.shape() == t.shape, "cannot export to ", arch.name, ": parameter \"",
        t.octet_name, "\" is ", shape_str(it->second.shape()), " but ", arch.name, " holds it as ",
        shape_str(t.shape),
        t.octet_name.find("attn.qkv") != std::string::npos
            ? " (grouped-query attention: config key model.n_kv_head must equal model.n_head)"
            : "");
  }
  for (const auto& [name, t] : values) {
    OCTET_CHECK(expected.count(name) == 1, "cannot export to ", arch.name,
                ": the model's parameter \"", name, "\" has no place in it",
                name == "lm_head.weight"
                    ? " (an LM head of its own: config key model.tie_embeddings is false, and " +
                          std::string(arch.name) + " ties it to the token embedding)"
                    : std::string());
  }
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  OCTET_CHECK(out.good(), "cannot write ", path.string(), ": ", std::strerror(errno));
}

}  // namespace

std::string export_hf(modules::GPT& model, const std::string& folder,
                      const HfExportOptions& options) {
  const HfArchitecture& arch = model.config().arch == modules::Arch::kLlama
                                   ? detail::llama_architecture()
                                   : detail::gpt2_architecture();
  const modules::GPTConfig& config = model.config();
  const nlohmann::ordered_json config_json = arch.write_config(config, options);
  const fs::path target(folder);
  std::error_code ec;
  OCTET_CHECK(!fs::exists(target, ec) || (fs::is_directory(target, ec) && fs::is_empty(target, ec)),
              "cannot export to ", folder, ": it exists and is not an empty folder");
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  OCTET_CHECK(fs::is_directory(parent, ec), "cannot export to ", folder, ": its parent ",
              parent.string(), " is not a directory");

  std::map<std::string, Tensor> values;
  for (auto& [name, t] : parameter_values(model)) values.emplace(name, std::move(t));
  const std::vector<HfTensor> tensors = arch.tensors(config);
  check_exportable(values, tensors, arch);
  NamedTensors out;
  for (const HfTensor& t : tensors) {
    const auto it = values.find(t.octet_name);
    int64_t row = 0;
    for (const HfPart& p : t.parts) {
      const int64_t rows = p.layout == HfLayout::kTransposed ? p.shape[1] : p.shape[0];
      Tensor part = it->second.slice(row, row + rows).clone();
      row += rows;
      if (p.layout == HfLayout::kTransposed) part = ops::transpose_2d(part);
      out.emplace_back(full_name(arch, arch.prefix, p.name), part.reshape(p.shape));
    }
  }

  TemporaryFolder tmp(target);
  write_text(tmp.path() / kConfigFile, config_json.dump(2) + "\n");
  // transformers refuses a safetensors file whose metadata does not say which framework wrote it.
  save_safetensors((tmp.path() / kWeightsFile).string(), out, {{"format", "pt"}});
  if (fs::exists(target, ec)) fs::remove(target, ec);  // the empty folder the check allowed
  tmp.commit(target);
  return std::string(arch.name);
}

NamedTensors parameter_values(modules::Module& model) {
  NamedTensors out;
  for (const modules::Parameter& p : model.parameters()) {
    Tensor v = p.is_fp8()                         ? ops::dequantize(**p.fp8, DType::kF32)
               : p.tensor->dtype() == DType::kF32 ? p.tensor->clone()
                                                  : ops::cast(*p.tensor, DType::kF32);
    out.emplace_back(p.name, v.device().is_cpu() ? v : v.to(Device::cpu()));
  }
  return out;
}

void load_parameter_values(modules::Module& model, const NamedTensors& values) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : values) {
    OCTET_CHECK(by_name.emplace(name, &t).second, "load_parameter_values: \"", name,
                "\" is given twice");
  }
  const std::vector<modules::Parameter> params = model.parameters();
  std::set<std::string> names;
  for (const modules::Parameter& p : params) names.insert(p.name);
  for (const auto& [name, t] : values) {
    OCTET_CHECK(names.count(name) == 1, "load_parameter_values: unexpected \"", name, "\" (the ",
                model.type(), " has no such parameter)");
  }
  for (const modules::Parameter& p : params) {
    const auto it = by_name.find(p.name);
    OCTET_CHECK(it != by_name.end(), "load_parameter_values: missing \"", p.name, "\"");
    const Tensor& src = *it->second;
    OCTET_CHECK(src.shape() == p.value_shape(), "load_parameter_values: \"", p.name, "\" is ",
                shape_str(src.shape()), " but the ", model.type(), " expects ",
                shape_str(p.value_shape()));
    OCTET_CHECK(
        src.dtype() == DType::kF32 || src.dtype() == DType::kBF16 || src.dtype() == DType::kF16,
        "load_parameter_values: \"", p.name, "\" is ", dtype_name(src.dtype()),
        ", expected f32, bf16 or f16");
    const Device device = p.is_fp8() ? (*p.fp8)->rowwise_data().device() : p.tensor->device();
    Tensor value = src.dtype() == DType::kF32 ? src : ops::cast(src, DType::kF32);
    if (value.device() != device) value = value.to(device);
    if (!p.is_fp8()) {
      ops::copy_(*p.tensor, value);  // bumps the version: a graph that saved the old value fails
      continue;
    }
    // As at construction: the cast reads the weight slot's scale but records no amax, so the
    // slot's history starts at zero like every other slot's.
    QuantizedTensor& q = **p.fp8;
    ops::quantize_into(q, value, AmaxRecording::kSkip);
    q.bump_version();
    if (p.initial_master != nullptr && p.initial_master->defined()) {
      ops::copy_(*p.initial_master, value);
    }
  }
}

}  // namespace octet::train
