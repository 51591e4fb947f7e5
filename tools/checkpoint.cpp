// Run checkpoints: the library checkpoint plus the command line's metadata.
#include "tools/checkpoint.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace octet::cli {

SafetensorsMetadata run_metadata(const TrainerState& state) {
  const nlohmann::json rng = {{"seed", state.rng.seed}, {"offset", state.rng.offset}};
  return {
      {"rng", rng.dump()},
      {"data_state", data::encode_state(state.data)},
      {"config", config::to_json(state.config).dump()},
  };
}

Checkpoint read_checkpoint(const std::string& path) {
  return with_error_context("checkpoint " + path, [&] {
    Checkpoint c;
    static_cast<train::Checkpoint&>(c) = train::read_checkpoint(path);
    c.state.step = train::metadata_int(c, "step");
    c.state.skipped_steps = train::metadata_int(c, "skipped_steps");
    const std::string& rng_text = train::metadata_at(c, "rng");
    const auto rng = nlohmann::json::parse(rng_text, nullptr, false);
    OCTET_CHECK(!rng.is_discarded() && rng.is_object() && rng.contains("seed") &&
                    rng["seed"].is_number_unsigned() && rng.contains("offset") &&
                    rng["offset"].is_number_unsigned(),
                "checkpoint ", path, ": __metadata__ \"rng\" is ", rng_text,
                ", expected {\"seed\": N, \"offset\": N}");
    c.state.rng = {rng["seed"].get<uint64_t>(), rng["offset"].get<uint64_t>()};
    try {
      c.state.data = data::decode_state(train::metadata_at(c, "data_state"));
    } catch (const Error& e) {
      OCTET_FAIL("checkpoint ", path, ": __metadata__ \"data_state\": ", e.what());
    }
    const auto config =
        nlohmann::ordered_json::parse(train::metadata_at(c, "config"), nullptr, false);
    OCTET_CHECK(!config.is_discarded() && config.is_object(), "checkpoint ", path,
                ": __metadata__ \"config\" is not a JSON object");
    c.state.config = config::from_json(config, "the config in checkpoint " + path);
    return c;
  });
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

}  // namespace octet::cli
