// A run checkpoint of any bytes (`octet eval --checkpoint`, `octet train --resume`): read, or an
// octet::Error naming the file. One that reads keeps its run state through a save and read
// (step, generator, data position, config), and, when its config describes a small built-in-task
// model, loads into that model and its optimizer as a resume does (or fails with an octet::Error
// naming the file): the model then holds the checkpoint's tensors.
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_support.h"
#include "modules/gpt.h"
#include "tools/checkpoint.h"
#include "tools/run.h"
#include "train/trainer.h"

namespace octet::fuzz {
namespace {

bool same_state(const cli::TrainerState& a, const cli::TrainerState& b) {
  return a.step == b.step && a.skipped_steps == b.skipped_steps && a.rng.seed == b.rng.seed &&
         a.rng.offset == b.rng.offset && a.data == b.data && a.config == b.config;
}

// Small enough to build for every input that reads: at most ~1M parameters.
bool small_model(const config::RunConfig& c) {
  const double d = static_cast<double>(c.model.d_model);
  const double params = static_cast<double>(c.model.n_layer) * 16 * d * d +
                        static_cast<double>(c.model.vocab + c.model.seq_len + 64) * d;
  return c.data.kind == "task" && c.training.device == "cpu" && params <= 1e6;
}

void check_loads_into_model(const cli::Checkpoint& c) {
  const config::RunConfig& cfg = c.state.config;
  std::unique_ptr<data::Dataset> dataset;
  std::unique_ptr<modules::GPT> model;
  std::unique_ptr<train::Trainer> trainer;
  // A config that passed validation can still describe no model for this data (a vocabulary
  // smaller than the task's): an octet::Error, as in `octet eval`.
  if (!parses("", [&] {
        dataset = data::open_dataset(config::data_options(cfg));
        model = std::make_unique<modules::GPT>(cli::gpt_config(cfg, *dataset));
        trainer = std::make_unique<train::Trainer>(*model, cli::trainer_options(cfg));
      })) {
    return;
  }
  if (!parses(c.path, [&] { trainer->load(c); })) return;
  for (const auto& [name, tensor] : model->state_dict()) {
    bool found = false;
    for (const auto& [saved_name, saved] : c.model) {
      if (saved_name != name) continue;
      found = true;
      OCTET_FUZZ_CHECK(same_tensor(tensor, saved), "model tensor \"", name,
                       "\" differs from the checkpoint's after the load");
    }
    OCTET_FUZZ_CHECK(found, "the model loaded although the checkpoint lacks \"", name, "\"");
  }
  // The data position is checked against the data when a run resumes.
  parses("data state", [&] { dataset->set_state(c.state.data); });
}

int fuzz_input(const std::string& bytes) {
  static const std::string path = scratch_path("checkpoint.safetensors");
  static const std::string copy = scratch_path("copy.safetensors");
  if (names_special_file(bytes)) return 0;
  write_file(path, bytes);

  cli::Checkpoint c;
  if (!parses(path, [&] { c = cli::read_checkpoint(path); })) return 0;

  // The run state written as octet writes it reads back the same.
  SafetensorsMetadata metadata = c.metadata;
  for (const auto& [key, value] : cli::run_metadata(c.state)) metadata[key] = value;
  save_safetensors(copy, c.tensors, metadata);
  cli::Checkpoint back;
  if (!parses("", [&] { back = cli::read_checkpoint(copy); })) {
    fail("a checkpoint that read does not read back after a save");
  }
  OCTET_FUZZ_CHECK(same_state(c.state, back.state), "the run state changed through a save");

  if (small_model(c.state.config)) check_loads_into_model(c);
  return 0;
}

}  // namespace
}  // namespace octet::fuzz

OCTET_FUZZ_HARNESS(octet::fuzz::fuzz_input)
