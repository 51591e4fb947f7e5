// Datasets that feed the trainer (B, T) batches of token ids: llm.c token shards, a UTF-8 text
// file as bytes, or a built-in algorithmic task. Every dataset's cursor can be saved and restored.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "runtime/tensor.h"

namespace octet::data {

// Targets with this id count for nothing (the cross-entropy convention of PyTorch and llm.c).
inline constexpr int32_t kIgnoreIndex = -100;

enum class Split : uint8_t { kTrain, kValidation };
std::string_view split_name(Split split);  // "train", "validation"

// What the trainer reports on held-out data.
enum class Metric : uint8_t {
  kLoss,         // mean cross-entropy per token (token shards, text through a BPE tokenizer)
  kBitsPerByte,  // mean cross-entropy / ln 2: one token is one byte (text as byte tokens)
  kExactMatch,   // fraction of held-out answers generated exactly (algorithmic tasks)
};

struct Batch {
  Tensor inputs;   // (B, T) i32 token ids
  Tensor targets;  // (B, T) i32: the token after each input, or kIgnoreIndex where no loss counts
};

// Where a split's next batch starts. Token streams: `segment` is the shard (or the part of one)
// and `position` the token offset in it. Tasks: `position` is the number of examples drawn (each
// example is a pure function of the seed and its index, so this is the whole RNG state).
struct Cursor {
  uint64_t segment = 0;
  uint64_t position = 0;
  friend bool operator==(const Cursor&, const Cursor&) = default;
};

struct DataState {
  Cursor train;
  Cursor validation;
  friend bool operator==(const DataState&, const DataState&) = default;
};

// A compact JSON form for checkpoints: {"train":[segment,position],"validation":[...]}.
std::string encode_state(const DataState& state);
DataState decode_state(std::string_view text);  // throws, naming what is malformed

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual std::string describe() const = 0;  // one line for logs and the run summary
  virtual int64_t vocab_size() const = 0;    // every token id is below this
  // The sequence length each example needs (tasks), or 0 when any length works.
  virtual int64_t natural_seq_len() const = 0;
  virtual Metric metric() const = 0;

  // The next (batch_size, seq_len) batch of `split`; advances that split's cursor only.
  Batch next_batch(Split split, int64_t batch_size, int64_t seq_len) {
    return next_rows(split, batch_size, seq_len, 0, batch_size);
  }
  // Rows [first, first + rows) of that batch, (rows, seq_len), with the cursor advanced past the
  // whole batch: each rank of a data-parallel run reads only its own rows of every global
  // batch, and its cursor stays where one process's would (so any number of ranks resumes it).
  virtual Batch next_rows(Split split, int64_t batch_size, int64_t seq_len, int64_t first,
                          int64_t rows) = 0;
  // How many distinct batches one pass over `split` holds before it repeats (-1: unbounded).
  virtual int64_t batches_per_pass(Split split, int64_t batch_size, int64_t seq_len) const = 0;

  // Text to token ids and back, for prompts and generated output. Throws where the data has no
  // tokenizer (token shards) or the text holds a character outside the vocabulary.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& tokens) const = 0;
  // The tokenizer behind encode and decode, for a checkpoint to carry; nullptr where the text
  // needs none carried (tasks) or there is none (token shards without one).
  virtual const Tokenizer* tokenizer() const { return nullptr; }

  // The cursors; set_state checks them against this dataset (a resume with other data fails).
  DataState state() const { return state_; }
  void set_state(const DataState& state);
  // Back to the start of `split` (so each evaluation sees the same validation batches).
  void rewind(Split split) { cursor(split) = Cursor{}; }

 protected:
  Cursor& cursor(Split split) { return split == Split::kTrain ? state_.train : state_.validation; }
  // Throws when `cursor` cannot belong to `split` of this dataset.
  virtual void check_cursor(Split split, const Cursor& cursor) const = 0;

 private:
  DataState state_;
};

enum class DataKind : uint8_t { kTask, kText, kShards };
enum class TaskKind : uint8_t { kSort, kAdd };
DataKind parse_data_kind(std::string_view name);  // "task", "text", "shards"
TaskKind parse_task_kind(std::string_view name);  // "sort", "add"
std::string_view data_kind_name(DataKind kind);
std::string_view task_kind_name(TaskKind kind);

struct DataOptions {
  DataKind kind = DataKind::kTask;
  std::string path;      // text: the file; shards: a file, glob pattern or directory
  std::string val_path;  // shards: validation shards; empty: hold out the tail instead
  // Text and shards: a tokenizer.json, or a folder with tokenizer.json or vocab.json +
  // merges.txt (Tokenizer::load). Empty: text is byte tokens, shards have no tokenizer.
  std::string tokenizer_path;
  // When set, used instead of reading tokenizer_path (a checkpoint's own tokenizer).
  std::optional<Tokenizer> tokenizer;
  double val_fraction = 0.1;  // the held-out tail of text, or of shards without val_path
  TaskKind task = TaskKind::kSort;
  int64_t task_digits = 6;  // sort: digits per sequence; add: digits per operand
  uint64_t seed = 1;        // tasks: which problems are drawn and which are held out
};

std::unique_ptr<Dataset> open_dataset(const DataOptions& options);

namespace detail {
// (B, T) i32 tensors filled by the caller; shared by every dataset.
Batch empty_batch(int64_t batch_size, int64_t seq_len);
// Throws unless [first, first + rows) is a non-empty range of a batch's rows.
void check_rows(int64_t batch_size, int64_t first, int64_t rows);
}  // namespace detail

}  // namespace octet::data
