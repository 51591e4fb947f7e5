// Uses octet as a library: trains a LayerNormMLP under FP8 delayed scaling with AdamW to map random
// inputs onto fixed random targets with train::Trainer, saves a checkpoint half way, restores it
// into a fresh module and finishes there, and fails unless the loss fell and the resumed run's
// losses equal the uninterrupted run's bit for bit. Alone it is one process; under
// `mpirun -np 2` the same program trains data-parallel: each rank takes its own rows of the
// batch and the trainer keeps the ranks' weights and FP8 state identical.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "octet/octet.h"

using namespace octet;

namespace {

constexpr int64_t kTokens = 64, kHidden = 64, kFfn = 256;  // FP8 GEMMs: rows % 8, cols % 16
constexpr int kSteps = 30, kSaveAt = 15;

modules::LayerNormMLPOptions mlp_options(const Recipe& recipe) {
  modules::LayerNormMLPOptions options;
  options.linear.recipe = recipe;
  options.linear.seed = 1;
  return options;
}

train::TrainerOptions trainer_options(const Recipe& recipe) {
  train::TrainerOptions options;  // AdamW, clipping at 1.0
  options.recipe = recipe;
  options.schedule.base_lr = 3e-3f;
  options.schedule.total_steps = kSteps;
  // Every process the launcher started (one without a launcher: then MPI is never touched).
  options.comm = world_communicator();
  return options;
}

// Steps [from, to) of `trainer`, the loss of each step.
std::vector<double> run(train::Trainer& trainer, modules::LayerNormMLP& mlp, const Tensor& x,
                        const Tensor& target, int from, int to) {
  std::vector<double> losses;
  for (int step = from; step < to; ++step) {
    const train::StepResult r = trainer.step([&](int64_t, modules::FirstMicrobatch first) {
      const Tensor diff = autograd::sub(mlp.forward(x, first), target);  // inside the FP8 scope
      return autograd::mean(autograd::mul(diff, diff));
    });
    if (trainer.rank() == 0) std::printf("step %2d  loss %.5f\n", step, r.loss);
    losses.push_back(r.loss);
  }
  return losses;
}

}  // namespace

int main() {
  const std::shared_ptr<Communicator> world = world_communicator();
  try {
    const Recipe recipe = Recipe::delayed(FP8Format::kHybrid);  // e4m3 forward, e5m2 gradients
    Generator gen(7);
    Tensor all_x = Tensor::empty({kTokens, kHidden}, DType::kF32);       // (tokens, hidden)
    Tensor all_target = Tensor::empty({kTokens, kHidden}, DType::kF32);  // (tokens, hidden)
    gen.fill_normal(all_x, 0.f, 1.f);
    gen.fill_normal(all_target, 0.f, 0.5f);
    // This rank's rows (all of them in one process).
    const int64_t rows = kTokens / world->size(), first_row = world->rank() * rows;
    const Tensor x = all_x.slice(first_row, first_row + rows);
    const Tensor target = all_target.slice(first_row, first_row + rows);
    const std::string checkpoint =
        (std::filesystem::temp_directory_path() / "octet_consumer_checkpoint.safetensors").string();

    // The whole run, with a checkpoint (module, optimizer, every FP8 meta, the step) half way.
    modules::LayerNormMLP mlp(kHidden, kFfn, mlp_options(recipe));
    train::Trainer trainer(mlp, trainer_options(recipe));
    std::vector<double> straight = run(trainer, mlp, x, target, 0, kSaveAt);
    trainer.save(checkpoint);
    const std::vector<double> rest = run(trainer, mlp, x, target, kSaveAt, kSteps);
    straight.insert(straight.end(), rest.begin(), rest.end());

    // A fresh module and trainer restored from the checkpoint finish the run exactly.
    modules::LayerNormMLP resumed(kHidden, kFfn, mlp_options(recipe));
    train::Trainer resumed_trainer(resumed, trainer_options(recipe));
    resumed_trainer.load(checkpoint);  // every rank has read it when load returns
    if (world->rank() == 0) {
      std::filesystem::remove(checkpoint);
      std::printf("resumed at step %lld\n", static_cast<long long>(resumed_trainer.steps_done()));
    }
    const std::vector<double> again = run(resumed_trainer, resumed, x, target, kSaveAt, kSteps);

    for (size_t i = 0; i < again.size(); ++i) {
      if (again[i] != straight[kSaveAt + i]) {
        std::fprintf(stderr, "step %zu: resumed loss %.9g != %.9g\n", kSaveAt + i, again[i],
                     straight[kSaveAt + i]);
        return 1;
      }
    }
    const double first = straight.front(), last = straight.back();
    if (!(last < 0.8 * first)) {
      std::fprintf(stderr, "loss did not fall: %.5f -> %.5f\n", first, last);
      return 1;
    }
    if (world->rank() == 0) {
      std::printf(
          "loss fell from %.5f to %.5f on %d rank(s); the resumed run matched bit for bit\n", first,
          last, world->size());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", world->rank(), e.what());
    if (world->size() > 1) world->abort(1);  // no rank may wait for this one forever
    return 1;
  }
}
