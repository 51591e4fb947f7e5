// Checkpoint save and load on top of the safetensors reader and writer.
#include "tools/checkpoint.h"

#include <charconv>

#include "runtime/error.h"

namespace octet::train {
namespace {

int64_t parse_int(const Checkpoint& c, const std::string& key) {
  auto it = c.metadata.find(key);
  OCTET_CHECK(it != c.metadata.end(), "checkpoint ", c.path, ": __metadata__ lacks \"", key, "\"");
  int64_t value = 0;
  const std::string& text = it->second;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  OCTET_CHECK(ec == std::errc() && end == text.data() + text.size() && value >= 0, "checkpoint ",
              c.path, ": __metadata__ \"", key, "\" is \"", text,
              "\", expected a non-negative integer");
  return value;
}

const std::string& metadata_at(const Checkpoint& c, const std::string& key) {
  auto it = c.metadata.find(key);
  OCTET_CHECK(it != c.metadata.end(), "checkpoint ", c.path, ": __metadata__ lacks \"", key, "\"");
  return it->second;
}

}  // namespace

void save_checkpoint(const std::string& path, modules::Module& model, modules::Optimizer* optimizer,
                     const TrainerState& state) {
  NamedTensors tensors;
  for (auto& [name, t] : model.state_dict())
    tensors.emplace_back(std::string(kModelPrefix) + name, t);
  if (optimizer != nullptr) {
    for (auto& [name, t] : optimizer->state_dict()) {
      tensors.emplace_back(std::string(kOptimizerPrefix) + name, t);
    }
  }
  const nlohmann::json rng = {{"seed", state.rng.seed}, {"offset", state.rng.offset}};
  SafetensorsMetadata metadata = {
      {"format", std::string(kCheckpointFormat)},
      {"version", std::to_string(kCheckpointVersion)},
      {"step", std::to_string(state.step)},
      {"skipped_steps", std::to_string(state.skipped_steps)},
      {"rng", rng.dump()},
      {"data_state", data::encode_state(state.data)},
      {"config", config::to_json(state.config).dump()},
  };
  save_safetensors(path, tensors, metadata);
}

Checkpoint read_checkpoint(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  Checkpoint c;
  c.path = path;
  c.metadata = std::move(file.metadata);
  c.tensors = std::move(file.tensors);
  auto format = c.metadata.find("format");
  OCTET_CHECK(format != c.metadata.end() && format->second == kCheckpointFormat, "checkpoint ",
              path, " is a safetensors file but not an octet checkpoint (its __metadata__ has no ",
              "\"format\": \"", kCheckpointFormat, "\")");
  const int64_t version = parse_int(c, "version");
  OCTET_CHECK(version == kCheckpointVersion, "checkpoint ", path, " has format version ", version,
              "; this octet reads version ", kCheckpointVersion);
  c.state.step = parse_int(c, "step");
  c.state.skipped_steps = parse_int(c, "skipped_steps");
  const auto rng = nlohmann::json::parse(metadata_at(c, "rng"), nullptr, false);
  OCTET_CHECK(!rng.is_discarded() && rng.is_object() && rng.contains("seed") &&
                  rng["seed"].is_number_unsigned() && rng.contains("offset") &&
                  rng["offset"].is_number_unsigned(),
              "checkpoint ", path, ": __metadata__ \"rng\" is ", metadata_at(c, "rng"),
              ", expected {\"seed\": N, \"offset\": N}");
  c.state.rng = {rng["seed"].get<uint64_t>(), rng["offset"].get<uint64_t>()};
  try {
    c.state.data = data::decode_state(metadata_at(c, "data_state"));
  } catch (const Error& e) {
    OCTET_FAIL("checkpoint ", path, ": __metadata__ \"data_state\": ", e.what());
  }
  const auto config = nlohmann::ordered_json::parse(metadata_at(c, "config"), nullptr, false);
  OCTET_CHECK(!config.is_discarded() && config.is_object(), "checkpoint ", path,
              ": __metadata__ \"config\" is not a JSON object");
  c.state.config = config::from_json(config, "the config in checkpoint " + path);
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
  return c;
}

void load_model_state(modules::Module& model, const Checkpoint& checkpoint) {
  try {
    model.load_state_dict(checkpoint.model);
  } catch (const Error& e) {
    OCTET_FAIL("checkpoint ", checkpoint.path,
               " does not fit the model its config describes: ", e.what());
  }
  // Module::load_state_dict also drops the FP8 primary weights' stale column-wise data and brings
  // their f32 master in line with the loaded weight; a resumed optimizer then loads its own.
}

void check_resumable(const config::RunConfig& saved, const config::RunConfig& run,
                     const std::string& path) {
  const auto a = config::to_json(saved);
  const auto b = config::to_json(run);
  for (const char* section : {"model", "fp8", "data"}) {
    for (const auto& [key, value] : a[section].items()) {
      OCTET_CHECK(b[section][key] == value, "cannot resume from ", path, ": it was trained with ",
                  section, ".", key, "=", value.dump(), " but this run has ", section, ".", key,
                  "=", b[section][key].dump(), " (these keys must stay the same)");
    }
  }
  OCTET_CHECK(a["optimizer"]["kind"] == b["optimizer"]["kind"], "cannot resume from ", path,
              ": it was trained with optimizer.kind=", a["optimizer"]["kind"].dump(),
              " but this run has optimizer.kind=", b["optimizer"]["kind"].dump());
}

}  // namespace octet::train
