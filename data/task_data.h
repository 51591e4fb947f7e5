// Built-in algorithmic tasks (digit sorting, multi-digit addition) generated in process from a
// seed, with a held-out set disjoint from training and exact-match scoring of generated answers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace octet::data {

// Task tokens: digits are ids 0-9, then '+', '=', '>' and '.' (padding). The vocabulary is 16 so
// the LM head's output width meets the FP8 GEMM shape rule (a multiple of 16).
inline constexpr int32_t kTokenPlus = 10;
inline constexpr int32_t kTokenEquals = 11;
inline constexpr int32_t kTokenSorted = 12;
inline constexpr int32_t kTokenPad = 13;
inline constexpr int64_t kTaskVocab = 16;
inline constexpr std::string_view kTaskAlphabet = "0123456789+=>.";
// One problem in this many is held out (by a seeded hash of its prompt).
inline constexpr uint64_t kHeldOutEvery = 10;

struct TaskExample {
  std::vector<int32_t> prompt;  // sort: "314159>"; add: "47+85="
  std::vector<int32_t> answer;  // sort: "113459"; add: "231" (132, least-significant digit first)
};

struct ExactMatch {
  int64_t correct = 0;
  int64_t total = 0;
  std::vector<std::string> mistakes;  // the first few: "314159> gave 113449, want 113459"
  double accuracy() const { return total > 0 ? static_cast<double>(correct) / total : 0.0; }
};

// Answers prompts: given (N, P) i32 prompts, returns (N, answer_len) i32 generated tokens (greedy
// decoding for exact match). The trainer supplies it; this layer knows no model.
using GenerateFn = std::function<Tensor(const Tensor& prompts, int64_t answer_len)>;

// Rows hold one example each: prompt then answer, padded after the end; targets count only where
// the next token is part of the answer. Train and validation are disjoint by problem: a prompt is
// held out iff a hash of it and the seed says so, and each split draws only its own problems.
class AlgorithmicTask final : public Dataset {
 public:
  // sort: `digits` digits 0-9 in [3, 16]; add: two operands of `digits` digits in [2, 8].
  AlgorithmicTask(TaskKind kind, int64_t digits, uint64_t seed);

  std::string describe() const override;
  int64_t vocab_size() const override { return kTaskVocab; }
  int64_t natural_seq_len() const override { return prompt_len() + answer_len() - 1; }
  Metric metric() const override { return Metric::kExactMatch; }
  Batch next_rows(Split split, int64_t batch_size, int64_t seq_len, int64_t first,
                  int64_t rows) override;
  int64_t batches_per_pass(Split, int64_t, int64_t) const override { return -1; }
  std::vector<int32_t> encode(std::string_view text) const override;      // spaces are skipped
  std::string decode(const std::vector<int32_t>& tokens) const override;  // unknown ids: '?'

  TaskKind kind() const { return kind_; }
  int64_t digits() const { return digits_; }
  uint64_t seed() const { return seed_; }
  int64_t prompt_len() const;
  int64_t answer_len() const;

  // Example `index` of `split`: a pure function of (seed, split, index), so a cursor that counts
  // examples is the whole generator state.
  TaskExample example(Split split, uint64_t index) const;
  bool is_held_out(const std::vector<int32_t>& prompt) const;
  // The answer to a well-formed prompt of this task.
  std::vector<int32_t> solve(const std::vector<int32_t>& prompt) const;

  // Exact match on held-out examples 0 .. count-1 (the same problems at every call), asking
  // `generate` for answers `batch_size` prompts at a time. With `shares` > 1, only the batches k
  // with k % shares == share (a data-parallel rank's share; the ranks' counts add up to the
  // whole).
  ExactMatch evaluate(int64_t count, int64_t batch_size, const GenerateFn& generate,
                      int64_t share = 0, int64_t shares = 1) const;

 protected:
  void check_cursor(Split split, const Cursor& cursor) const override;

 private:
  TaskKind kind_;
  int64_t digits_;
  uint64_t seed_;
};

}  // namespace octet::data
