// Held-out evaluation of a GPT on a dataset: the mean validation loss and the dataset's metric
// (exact match of greedy answers for tasks, bits per byte for text, the loss for shards), with
// gradients disabled so no FP8 scale moves. Trainer::fit calls it; so do `octet eval` and
// applications.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "modules/gpt.h"
#include "runtime/comm.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"

namespace octet::train {

struct EvalOptions {
  int64_t batch_size = 0;   // sequences per validation batch (> 0; Trainer::fit: 0 takes its own)
  int64_t seq_len = 0;      // tokens per sequence (> 0; Trainer::fit: 0 takes its own)
  int64_t batches = 4;      // validation batches whose mean loss is reported
  int64_t examples = 1000;  // held-out problems answered by greedy generation (tasks)
};

struct EvalResult {
  data::Metric metric = data::Metric::kLoss;
  double value = 0.0;  // accuracy in [0, 1], bits per byte, or loss
  // The mean cross-entropy (nats per token) over the first `batches` validation batches, for
  // every dataset: the held-out counterpart of the training loss.
  double loss = 0.0;
  int64_t examples = 0;  // held-out problems (tasks) or validation tokens
  std::vector<std::string> mistakes;
  std::string name() const;  // "accuracy", "bits_per_byte", "loss"
  std::string text() const;  // "accuracy 99.7%", "bits per byte 1.234", "loss 3.210"
};

// Evaluates `model` in eval mode under `recipe`'s FP8 scope (none: high precision), then restores
// its mode. The validation cursor is left where it was, so an evaluation changes nothing a
// checkpoint records. Data parallel (`comm` of several ranks): each rank evaluates its share of
// the batches and the ranks add up the counts and losses (the mistakes shown are this rank's).
EvalResult evaluate(modules::GPT& model, data::Dataset& dataset, const EvalOptions& options,
                    const std::optional<Recipe>& recipe, Communicator* comm = nullptr);

// Greedy (temperature 0) or sampled continuation of (N, P) prompts under `recipe`'s FP8 scope;
// returns (N, new_tokens). GPT::generate runs in inference mode.
Tensor generate_tokens(modules::GPT& model, const std::optional<Recipe>& recipe,
                       const Tensor& prompts, int64_t new_tokens, float temperature,
                       Generator* gen);
// The same with every option of GPT::generate (top-k, top-p, an end-of-sequence id, the cache).
modules::Generation generate(modules::GPT& model, const std::optional<Recipe>& recipe,
                             const Tensor& prompts, const modules::GenerateOptions& options,
                             Generator* gen);

}  // namespace octet::train
