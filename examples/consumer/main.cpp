// Uses octet as a library: writes two small llm.c token shards of text (byte tokens), trains a
// 2-layer GPT on them under FP8 delayed scaling with train::Trainer::fit, and fails unless the loss
// fell and a run that was stopped after step 25 and resumed from its step-20 checkpoint (a fresh
// model, trainer and dataset) gives the uninterrupted run's losses bit for bit. Then rank 0 exports
// the trained model as a Hugging Face folder, imports it into a fresh model, and generates text
// from it over the key/value cache: the imported model must continue "abcdef" as the trained one
// does. Alone it is one process; under `mpirun -np 2` the same program trains data-parallel: each
// rank reads its own rows of every batch and the trainer keeps the ranks' weights and FP8 state
// identical.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "octet/octet.h"

using namespace octet;

namespace {

constexpr int64_t kSteps = 40, kCheckpointEvery = 10, kStopAfter = 25;
// Byte tokens (data::Tokenizer::bytes()): the text is lowercase letters and spaces, so 128 ids.
constexpr int64_t kVocab = 128, kSeqLen = 32, kBatch = 8;  // FP8 GEMMs: rows % 8, cols % 16

// Text as byte tokens: runs of consecutive letters ("klmnop qrs ...", z wrapping to a) from
// random starts, a space between runs: a stream a small model learns quickly.
std::vector<uint16_t> token_stream(int64_t count, uint64_t seed) {
  Generator gen(seed);
  std::string text;
  while (static_cast<int64_t>(text.size()) < count) {
    const uint32_t start = gen.next_u32() % 26, length = 4 + gen.next_u32() % 12;
    for (uint32_t i = 0; i < length; ++i) text.push_back(static_cast<char>('a' + (start + i) % 26));
    text.push_back(' ');
  }
  text.resize(static_cast<size_t>(count));
  const std::vector<int32_t> ids = data::Tokenizer::bytes().encode(text);
  return {ids.begin(), ids.end()};
}

modules::GPTConfig gpt_config(const Recipe& recipe) {
  modules::GPTConfig config;
  config.vocab_size = kVocab;
  config.max_seq_len = kSeqLen;
  config.n_layer = 2;
  config.d_model = 64;
  config.n_head = 4;
  config.recipe = recipe;
  config.seed = 1;
  return config;
}

train::TrainerOptions trainer_options(const Recipe& recipe) {
  train::TrainerOptions options;  // AdamW, clipping at 1.0
  options.recipe = recipe;
  options.schedule.base_lr = 3e-3f;
  options.schedule.warmup_steps = 5;
  options.schedule.total_steps = kSteps;
  // Every process the launcher started (one without a launcher: then MPI is never touched).
  options.comm = world_communicator();
  return options;
}

// Prints rank 0's progress and can stop the run after a step, as a killed process would.
class Printer final : public train::FitObserver {
 public:
  Printer(int rank, int64_t stop_after) : rank_(rank), stop_after_(stop_after) {}
  void on_log(const train::StepResult& r, double) override {
    if (rank_ == 0) std::printf("step %2lld  loss %.5f\n", static_cast<long long>(r.step), r.loss);
  }
  void on_checkpoint(int64_t step, const std::string& path) override {
    if (rank_ == 0)
      std::printf("checkpoint at step %lld: %s\n", static_cast<long long>(step), path.c_str());
  }
  bool interrupt_after(int64_t step) override { return step == stop_after_; }

 private:
  int rank_;
  int64_t stop_after_;
};

// One run: a fresh model, trainer and dataset; resumed from `resume_from` when it is not empty.
// The trained model goes to `trained` when it is given.
train::FitResult run(const std::string& shards, const std::string& checkpoint,
                     const std::string& resume_from, int64_t stop_after,
                     std::unique_ptr<modules::GPT>* trained = nullptr) {
  const Recipe recipe = Recipe::delayed(FP8Format::kHybrid);  // e4m3 forward, e5m2 gradients
  auto data = data::open_dataset({.kind = data::DataKind::kShards,
                                  .path = shards + "/train_*.bin",
                                  .val_path = shards + "/val_*.bin"});
  auto owned = std::make_unique<modules::GPT>(gpt_config(recipe));
  modules::GPT& model = *owned;
  train::Trainer trainer(model, trainer_options(recipe));
  if (!resume_from.empty()) trainer.resume(resume_from, *data);  // model, optimizer, FP8, data
  train::FitOptions fit;
  fit.steps = kSteps;
  fit.batch_size = kBatch / trainer.world_size();  // each rank's rows of a global batch of 8
  fit.seq_len = kSeqLen;
  fit.log_interval = 5;
  fit.checkpoint_interval = kCheckpointEvery;
  fit.checkpoint_path = checkpoint;
  fit.eval.batch_size = kBatch;
  fit.eval.batches = 4;
  Printer printer(trainer.rank(), stop_after);
  const train::FitResult result = trainer.fit(*data, fit, &printer);
  if (trained != nullptr) *trained = std::move(owned);
  return result;
}

// Greedy continuation of "abcdef" over the key/value cache, as text, in high precision (an
// imported model has the weights but not the FP8 scales training settled on).
std::string continue_text(modules::GPT& model) {
  const data::Tokenizer bytes = data::Tokenizer::bytes();
  const std::vector<int32_t> ids = bytes.encode("abcdef");
  const Tensor prompt =
      Tensor::from_bytes(ids.data(), {1, static_cast<int64_t>(ids.size())}, DType::kI32);
  modules::GenerateOptions g;
  g.new_tokens = 6;
  const modules::Generation out = train::generate(model, std::nullopt, prompt, g, nullptr);
  const int32_t* t = out.tokens.data_as<int32_t>();
  return bytes.decode(std::vector<int32_t>(t, t + out.tokens.numel()));
}

// The trained model out as a Hugging Face folder and back into a fresh one; both continue the
// prompt alike. Returns an error message, or "" when all is well.
std::string hf_round_trip(modules::GPT& trained, const std::filesystem::path& dir) {
  const std::string folder = (dir / "hf").string();
  train::export_hf(trained, folder);
  const train::HfModel hf = train::import_hf(folder);
  modules::GPT imported(hf.config);
  train::load_parameter_values(imported, hf.weights);
  const std::string want = continue_text(trained), got = continue_text(imported);
  if (got != want) return "the imported model continues the prompt differently";
  std::printf("exported as %s and imported: \"abcdef\" continues as \"%s\"\n",
              hf.architecture.c_str(), got.c_str());
  return "";
}

}  // namespace

int main() {
  const std::shared_ptr<Communicator> world = world_communicator();
  try {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() /
        ("octet_consumer_" + std::to_string(world->size()) + "_ranks");
    const std::string shards = (dir / "shards").string();
    run_collectively(*world, [&] {  // rank 0 writes the data; every rank reads it after
      if (world->rank() != 0) return;
      std::filesystem::create_directories(shards);
      data::write_token_shard(shards + "/train_000.bin", token_stream(40000, 1));
      data::write_token_shard(shards + "/train_001.bin", token_stream(30000, 2));
      data::write_token_shard(shards + "/val_000.bin", token_stream(8000, 3));
    });

    std::unique_ptr<modules::GPT> trained;
    const train::FitResult straight =
        run(shards, (dir / "straight.safetensors").string(), "", 0, &trained);
    const std::string checkpoint = (dir / "checkpoint.safetensors").string();
    const train::FitResult stopped = run(shards, checkpoint, "", kStopAfter);
    const train::FitResult resumed =
        run(shards, (dir / "resumed.safetensors").string(), checkpoint, 0);  // from step 20
    std::string round_trip;
    if (world->rank() == 0) round_trip = hf_round_trip(*trained, dir);
    world->barrier();
    if (world->rank() == 0) std::filesystem::remove_all(dir);
    if (!round_trip.empty()) {
      std::fprintf(stderr, "%s\n", round_trip.c_str());
      return 1;
    }

    if (!stopped.interrupted ||
        resumed.start_step != kStopAfter / kCheckpointEvery * kCheckpointEvery) {
      std::fprintf(stderr, "the stopped run's checkpoint is not at step 20 (resumed at %lld)\n",
                   static_cast<long long>(resumed.start_step));
      return 1;
    }
    for (const auto& [step, loss] : resumed.losses) {
      const double want = straight.losses[static_cast<size_t>(step - 1)].second;
      if (loss != want) {
        std::fprintf(stderr, "step %lld: resumed loss %.9g != %.9g\n", static_cast<long long>(step),
                     loss, want);
        return 1;
      }
    }
    const double first = straight.losses.front().second, last = straight.losses.back().second;
    if (!(last < 0.8 * first) || !(straight.final_eval->loss < 0.8 * first)) {
      std::fprintf(stderr, "loss did not fall: %.5f -> %.5f (held-out %.5f)\n", first, last,
                   straight.final_eval->loss);
      return 1;
    }
    if (world->rank() == 0) {
      std::printf(
          "loss fell from %.5f to %.5f (held-out %s) on %d rank(s); the run resumed at step %lld "
          "matched bit for bit\n",
          first, last, straight.final_eval->text().c_str(), world->size(),
          static_cast<long long>(resumed.start_step));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", world->rank(), e.what());
    if (world->size() > 1) world->abort(1);  // no rank may wait for this one forever
    return 1;
  }
}
