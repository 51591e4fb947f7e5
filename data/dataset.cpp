// What every dataset shares: split and kind names, the cursor state and its checkpoint form, and
// the factory that opens the dataset a run asks for.
#include "data/dataset.h"

#include <nlohmann/json.hpp>

#include "data/task_data.h"
#include "data/token_data.h"
#include "runtime/error.h"
#include "runtime/named.h"
#include "runtime/text_file.h"

namespace octet::data {

std::string_view split_name(Split split) { return split == Split::kTrain ? "train" : "validation"; }

std::string encode_state(const DataState& state) {
  const nlohmann::ordered_json json = {
      {"train", {state.train.segment, state.train.position}},
      {"validation", {state.validation.segment, state.validation.position}}};
  return json.dump();
}

DataState decode_state(std::string_view text) {
  return with_error_context("data state \"" + printable(text) + "\"", [&] {
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      OCTET_FAIL("data state \"", text, "\" is not valid JSON: ", json_error_text(e.what()));
    }
    auto cursor = [&](const char* key) {
      OCTET_CHECK(json.is_object() && json.contains(key), "data state \"", text, "\" has no \"",
                  key, "\" cursor");
      const nlohmann::json& pair = json[key];
      OCTET_CHECK(pair.is_array() && pair.size() == 2 && pair[0].is_number_unsigned() &&
                      pair[1].is_number_unsigned(),
                  "data state \"", text, "\": \"", key,
                  "\" must be [segment, position] with non-negative integers, got ", pair.dump());
      return Cursor{pair[0].get<uint64_t>(), pair[1].get<uint64_t>()};
    };
    DataState state{cursor("train"), cursor("validation")};
    OCTET_CHECK(json.size() == 2, "data state \"", text,
                "\" has keys other than \"train\" and \"validation\"");
    return state;
  });
}

void Dataset::set_state(const DataState& state) {
  check_cursor(Split::kTrain, state.train);
  check_cursor(Split::kValidation, state.validation);
  state_ = state;
}

namespace {
constexpr Named<DataKind> kDataKinds[] = {
    {DataKind::kTask, "task"}, {DataKind::kText, "text"}, {DataKind::kShards, "shards"}};
constexpr Named<TaskKind> kTaskKinds[] = {{TaskKind::kSort, "sort"}, {TaskKind::kAdd, "add"}};
}  // namespace

DataKind parse_data_kind(std::string_view name) { return value_in(kDataKinds, name, "data kind"); }
TaskKind parse_task_kind(std::string_view name) { return value_in(kTaskKinds, name, "task"); }
std::string_view data_kind_name(DataKind kind) { return name_in(kDataKinds, kind); }
std::string_view task_kind_name(TaskKind kind) { return name_in(kTaskKinds, kind); }

std::unique_ptr<Dataset> open_dataset(const DataOptions& options) {
  return with_error_context(
      std::string(data_kind_name(options.kind)) + " data " + printable(options.path),
      [&]() -> std::unique_ptr<Dataset> {
        std::optional<Tokenizer> tokenizer = options.tokenizer;
        OCTET_CHECK(
            options.kind != DataKind::kTask || (!tokenizer && options.tokenizer_path.empty()),
            "a tokenizer is for text and token shard data: the built-in tasks have "
            "their own tokens");
        if (!tokenizer && !options.tokenizer_path.empty()) {
          tokenizer = Tokenizer::load(options.tokenizer_path);
        }
        switch (options.kind) {
          case DataKind::kTask:
            return std::make_unique<AlgorithmicTask>(options.task, options.task_digits,
                                                     options.seed);
          case DataKind::kText:
            OCTET_CHECK(!options.path.empty(), "text data needs a file path");
            return std::make_unique<TextDataset>(options.path, options.val_fraction,
                                                 tokenizer.value_or(Tokenizer::bytes()));
          case DataKind::kShards:
            OCTET_CHECK(!options.path.empty(), "token shard data needs a path or pattern");
            return std::make_unique<ShardDataset>(options.path, options.val_path,
                                                  options.val_fraction, std::move(tokenizer));
        }
        OCTET_FAIL("unknown data kind code ", static_cast<int>(options.kind));
      });
}

namespace detail {

Batch empty_batch(int64_t batch_size, int64_t seq_len) {
  return {Tensor::empty({batch_size, seq_len}, DType::kI32),
          Tensor::empty({batch_size, seq_len}, DType::kI32)};
}

void check_rows(int64_t batch_size, int64_t first, int64_t rows) {
  OCTET_CHECK(first >= 0 && rows >= 1 && first + rows <= batch_size, "rows [", first, ", ",
              first + rows, ") are not a non-empty part of a batch of ", batch_size, " rows");
}

}  // namespace detail
}  // namespace octet::data
