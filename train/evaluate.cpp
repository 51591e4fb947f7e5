// Held-out loss and metrics of a GPT on a dataset.
#include "train/evaluate.h"

#include <fmt/format.h>

#include <cmath>
#include <span>

#include "autograd/grad_mode.h"
#include "data/task_data.h"
#include "modules/fp8_autocast.h"
#include "runtime/error.h"

namespace octet::train {
namespace {

// An FP8 scope when there is a recipe; nothing otherwise.
class MaybeAutocast {
 public:
  explicit MaybeAutocast(const std::optional<Recipe>& recipe) {
    if (recipe) scope_.emplace(*recipe);
  }

 private:
  std::optional<modules::FP8Autocast> scope_;
};

// The mean loss over the first `batches` validation batches; the validation cursor is left where
// it was. Data parallel: rank r takes batches r, r + N, ... and the ranks add up their sums.
double heldout_loss(modules::GPT& model, data::Dataset& dataset, const EvalOptions& o,
                    const std::optional<Recipe>& recipe, Communicator* comm) {
  autograd::NoGradGuard no_grad;
  const data::DataState before = dataset.state();
  dataset.rewind(data::Split::kValidation);
  const int ranks = comm != nullptr ? comm->size() : 1;
  const int rank = comm != nullptr ? comm->rank() : 0;
  double sum = 0.0;
  for (int64_t b = 0; b < o.batches; ++b) {
    const data::Batch batch = dataset.next_batch(data::Split::kValidation, o.batch_size, o.seq_len);
    if (b % ranks != rank) continue;
    MaybeAutocast fp8(recipe);
    sum += model.loss(batch.inputs, batch.targets).item();
  }
  dataset.set_state(before);
  if (ranks > 1) comm->all_reduce(std::span<double>(&sum, 1), ReduceOp::kSum);
  return sum / static_cast<double>(o.batches);
}

// Exact match of greedy answers on the task's held-out problems, added up over the ranks.
data::ExactMatch task_match(modules::GPT& model, const data::AlgorithmicTask& task,
                            const EvalOptions& o, const std::optional<Recipe>& recipe,
                            Communicator* comm) {
  const int ranks = comm != nullptr ? comm->size() : 1;
  data::ExactMatch match = task.evaluate(
      o.examples, 256,
      [&](const Tensor& prompts, int64_t answer_len) {
        return generate_tokens(model, recipe, prompts, answer_len, 0.f, nullptr);
      },
      ranks > 1 ? comm->rank() : 0, ranks);
  if (ranks > 1) {
    double counts[2] = {static_cast<double>(match.correct), static_cast<double>(match.total)};
    comm->all_reduce(std::span<double>(counts, 2), ReduceOp::kSum);
    match.correct = static_cast<int64_t>(counts[0]);
    match.total = static_cast<int64_t>(counts[1]);
  }
  return match;
}

}  // namespace

std::string EvalResult::name() const {
  switch (metric) {
    case data::Metric::kExactMatch:
      return "accuracy";
    case data::Metric::kBitsPerByte:
      return "bits_per_byte";
    case data::Metric::kLoss:
      return "loss";
  }
  OCTET_FAIL("unknown metric ", static_cast<int>(metric));
}

std::string EvalResult::text() const {
  switch (metric) {
    case data::Metric::kExactMatch:
      return fmt::format("accuracy {:.1f}%", 100.0 * value);
    case data::Metric::kBitsPerByte:
      return fmt::format("bits per byte {:.4f}", value);
    case data::Metric::kLoss:
      return fmt::format("loss {:.4f}", value);
  }
  OCTET_FAIL("unknown metric ", static_cast<int>(metric));
}

Tensor generate_tokens(modules::GPT& model, const std::optional<Recipe>& recipe,
                       const Tensor& prompts, int64_t new_tokens, float temperature,
                       Generator* gen) {
  MaybeAutocast fp8(recipe);
  return model.generate(prompts, new_tokens, temperature, gen);  // (N, new_tokens)
}

modules::Generation generate(modules::GPT& model, const std::optional<Recipe>& recipe,
                             const Tensor& prompts, const modules::GenerateOptions& options,
                             Generator* gen) {
  MaybeAutocast fp8(recipe);
  return model.generate(prompts, options, gen);
}

EvalResult evaluate(modules::GPT& model, data::Dataset& dataset, const EvalOptions& o,
                    const std::optional<Recipe>& recipe, Communicator* comm) {
  OCTET_CHECK(o.batch_size > 0 && o.seq_len > 0 && o.batches > 0,
              "evaluate: batch_size, seq_len and batches must be > 0, got ", o.batch_size, ", ",
              o.seq_len, ", ", o.batches);
  const bool was_training = model.training();
  model.eval();
  EvalResult result;
  try {
    result.metric = dataset.metric();
    result.loss = heldout_loss(model, dataset, o, recipe, comm);
    if (const auto* task = dynamic_cast<const data::AlgorithmicTask*>(&dataset)) {
      data::ExactMatch match = task_match(model, *task, o, recipe, comm);
      result.value = match.accuracy();
      result.examples = match.total;
      result.mistakes = std::move(match.mistakes);
    } else {
      result.value =
          result.metric == data::Metric::kBitsPerByte ? result.loss / std::log(2.0) : result.loss;
      result.examples = o.batches * o.batch_size * o.seq_len;
    }
  } catch (...) {
    if (was_training) model.train();
    throw;
  }
  if (was_training) model.train();
  return result;
}

}  // namespace octet::train
