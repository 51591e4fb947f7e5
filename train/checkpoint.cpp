// Checkpoint save and load on top of the safetensors reader and writer.
#include "train/checkpoint.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "modules/fp8_state.h"
#include "runtime/error.h"

namespace octet::train {
namespace {

constexpr const char* kFormatKey = "format";
constexpr const char* kVersionKey = "version";
constexpr const char* kRecipesKey = "fp8_recipes";
constexpr const char* kQuantizedKey = "quantized";

// Each FP8 module's recipe, by module name ("" for a root that is itself an FP8 module).
nlohmann::ordered_json fp8_recipes(modules::Module& model) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (auto& [name, state] : model.fp8_states()) {
    if (state->has_recipe()) out[name] = recipe_to_json(state->recipe());
  }
  return out;
}

// Per FP8 primary weight: its format, dtype, logical shape, the tensors of its checkpoint form and
// the format's attributes (block shape, packing) where it has any.
nlohmann::ordered_json quantized_weights(modules::Module& model) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const modules::Parameter& p : model.parameters()) {
    if (!p.is_fp8()) continue;
    const QuantizedTensor& q = **p.fp8;
    nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
    for (const auto& [suffix, t] : q.rowwise_state()) {
      tensors.push_back(std::string(kModelPrefix) + p.name + suffix);
    }
    nlohmann::ordered_json entry = {{"format", std::string(q.format())},
                                    {"dtype", std::string(dtype_name(q.dtype()))},
                                    {"shape", q.shape()},
                                    {"tensors", std::move(tensors)}};
    const auto attributes = q.attributes();
    if (!attributes.empty()) {
      nlohmann::ordered_json a = nlohmann::ordered_json::object();
      for (const auto& [key, value] : attributes) a[key] = value;
      entry["attributes"] = std::move(a);
    }
    out[std::string(kModelPrefix) + p.name] = std::move(entry);
  }
  return out;
}

void check_recipes(const Checkpoint& c, modules::Module& model) {
  auto it = c.metadata.find(kRecipesKey);
  if (it == c.metadata.end()) return;  // written before recipes were recorded
  const auto saved = nlohmann::json::parse(it->second, nullptr, false);
  OCTET_CHECK(!saved.is_discarded() && saved.is_object(), "checkpoint ", c.path,
              ": __metadata__ \"", kRecipesKey, "\" is not a JSON object");
  for (auto& [name, state] : model.fp8_states()) {
    if (!state->has_recipe() || !saved.contains(name)) continue;
    const nlohmann::json live = recipe_to_json(state->recipe());
    // A recipe saved before a key existed compares with that key's default filled in.
    // The file's bytes decide each value's type: "recipe" is compared, never read as a string.
    nlohmann::json recorded = saved[name];
    if (recorded.is_object() && recorded.find("recipe") != recorded.end() &&
        recorded["recipe"] != "custom") {
      recorded = recipe_to_json(
          recipe_from_json(recorded, "checkpoint " + c.path + " recipe of \"" + name + "\""));
    }
    OCTET_CHECK(recorded == live, "checkpoint ", c.path, " was trained with recipe ",
                saved[name].dump(), " for module \"", name, "\", but the model runs it under ",
                live.dump(), " (build the model with the checkpoint's recipe)");
  }
}

// Values a file can hold but no run can use, refused here so that the error names the file and
// the tensor: a negative optimizer step would fail later with no file named. (FP8 scales are
// checked by their owners when the model loads the state: Module::load_state_dict.)
void check_values(const Checkpoint& c) {
  for (const auto& [name, t] : c.tensors) {
    if (name == std::string(kOptimizerPrefix) + "step" && t.dtype() == DType::kI64 &&
        t.numel() == 1 && t.device().is_cpu()) {
      const int64_t step = t.data_as<int64_t>()[0];
      OCTET_CHECK(step >= 0, "checkpoint ", c.path, ": tensor \"", name, "\" is ", step,
                  ", expected an optimizer step count >= 0");
    }
  }
}

}  // namespace

void save_checkpoint(const std::string& path, modules::Module& model, modules::Optimizer* optimizer,
                     const SafetensorsMetadata& metadata) {
  save_checkpoint(path, model, optimizer != nullptr ? optimizer->state_dict() : NamedTensors{},
                  metadata);
}

void save_checkpoint(const std::string& path, modules::Module& model,
                     const NamedTensors& optimizer_state, const SafetensorsMetadata& metadata) {
  NamedTensors tensors;
  for (auto& [name, t] : model.state_dict()) {
    tensors.emplace_back(std::string(kModelPrefix) + name, t);
  }
  for (const auto& [name, t] : optimizer_state) {
    tensors.emplace_back(std::string(kOptimizerPrefix) + name, t);
  }
  SafetensorsMetadata all = {
      {kFormatKey, std::string(kCheckpointFormat)},
      {kVersionKey, std::to_string(kCheckpointVersion)},
      {kRecipesKey, fp8_recipes(model).dump()},
      {kQuantizedKey, quantized_weights(model).dump()},
  };
  for (const auto& [key, value] : metadata) {
    OCTET_CHECK(all.find(key) == all.end(), "save_checkpoint: metadata key \"", key,
                "\" is written by octet itself");
    all.emplace(key, value);
  }
  save_safetensors(path, tensors, all);
}

Checkpoint read_checkpoint(const std::string& path) {
  return with_error_context("checkpoint " + path, [&] {
    SafetensorsFile file = load_safetensors(path);
    Checkpoint c;
    c.path = path;
    c.metadata = std::move(file.metadata);
    c.tensors = std::move(file.tensors);
    auto format = c.metadata.find(kFormatKey);
    OCTET_CHECK(format != c.metadata.end() && format->second == kCheckpointFormat, "checkpoint ",
                path,
                " is a safetensors file but not an octet checkpoint (its __metadata__ has no ",
                "\"format\": \"", kCheckpointFormat, "\")");
    const int64_t version = metadata_int(c, kVersionKey);
    OCTET_CHECK(version == kCheckpointVersion, "checkpoint ", path, " has format version ", version,
                "; this octet reads version ", kCheckpointVersion);
    for (const auto& [name, t] : c.tensors) {
      if (name.starts_with(kModelPrefix)) {
        c.model.emplace_back(name.substr(kModelPrefix.size()), t);
      } else if (name.starts_with(kOptimizerPrefix)) {
        c.optimizer.emplace_back(name.substr(kOptimizerPrefix.size()), t);
      } else {
        OCTET_FAIL("checkpoint ", path, " holds tensor \"", name, "\", which is neither \"",
                   kModelPrefix, "...\" nor \"", kOptimizerPrefix, "...\"");
      }
    }
    OCTET_CHECK(!c.model.empty(), "checkpoint ", path, " holds no model tensors");
    check_values(c);
    return c;
  });
}

void load_checkpoint(const Checkpoint& c, modules::Module& model, modules::Optimizer* optimizer) {
  check_recipes(c, model);
  try {
    model.load_state_dict(c.model);
  } catch (const Error& e) {
    OCTET_FAIL("checkpoint ", c.path, " cannot be loaded into the model: ", e.what());
  }
  if (optimizer == nullptr) return;
  try {
    optimizer->load_state_dict(c.optimizer);
  } catch (const Error& e) {
    OCTET_FAIL("checkpoint ", c.path, ": optimizer state does not fit: ", e.what());
  }
}

SafetensorsMetadata load_checkpoint(const std::string& path, modules::Module& model,
                                    modules::Optimizer* optimizer) {
  const Checkpoint c = read_checkpoint(path);
  load_checkpoint(c, model, optimizer);
  return c.metadata;
}

const std::string& metadata_at(const Checkpoint& c, const std::string& key) {
  auto it = c.metadata.find(key);
  OCTET_CHECK(it != c.metadata.end(), "checkpoint ", c.path, ": __metadata__ lacks \"", key, "\"");
  return it->second;
}

int64_t metadata_int(const Checkpoint& c, const std::string& key) {
  const std::string& text = metadata_at(c, key);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  OCTET_CHECK(ec == std::errc() && end == text.data() + text.size() && value >= 0, "checkpoint ",
              c.path, ": __metadata__ \"", key, "\" is \"", text,
              "\", expected a non-negative integer");
  return value;
}

}  // namespace octet::train
