// Token-stream datasets: llm.c token shards (memory-mapped, header-checked) and a UTF-8 text file
// as byte or BPE tokens, read llm.c-style in contiguous windows with a resumable cursor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/tokenizer.h"

namespace octet::data {

// llm.c shard layout: 256 little-endian int32 (magic, version, token count, unused), then
// `token count` little-endian uint16 tokens.
inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// One shard, memory-mapped read-only. open() validates magic, version and that the file size is
// exactly what the header's token count says; each failure names the file, the field, its value
// and the expected value.
class TokenShard {
 public:
  static std::shared_ptr<const TokenShard> open(const std::string& path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  const uint16_t* tokens() const { return tokens_; }
  int64_t size() const { return size_; }

 private:
  TokenShard(std::string path, void* map, size_t map_bytes, int64_t size);

  std::string path_;
  void* map_;
  size_t map_bytes_;
  const uint16_t* tokens_;
  int64_t size_;
};

// Writes a shard in the llm.c layout (for tests and for tools that prepare data).
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// The largest vocabulary whose ids fit the uint16 tokens of shards and token streams.
inline constexpr int64_t kMaxStreamVocab = 65536;
// Throws unless every id of `tokenizer` fits a uint16; `use` says what needs it ("token shards").
void check_stream_vocab(const Tokenizer& tokenizer, std::string_view use);

// The shard files a path names: the file itself, every *.bin in a directory, or the matches of a
// glob pattern, sorted by name. Throws when nothing matches.
std::vector<std::string> expand_shard_paths(const std::string& pattern);

// A contiguous run of tokens that batches are cut from; `owner` keeps the memory alive.
struct Segment {
  std::shared_ptr<const void> owner;
  const uint16_t* tokens = nullptr;
  int64_t size = 0;
  std::string name;  // for messages: "file.bin [0, 1000)"
};

// Batches as llm.c cuts them: row b of a batch at `position` is tokens
// [position + b*T, position + b*T + T) with targets shifted by one, so a batch reads B*T + 1
// tokens; the cursor then moves B*T on, to the next segment that can hold a batch when this one
// cannot, and back to the first after the last.
class TokenStreamDataset : public Dataset {
 public:
  int64_t natural_seq_len() const override { return 0; }
  Batch next_rows(Split split, int64_t batch_size, int64_t seq_len, int64_t first,
                  int64_t rows) override;
  int64_t batches_per_pass(Split split, int64_t batch_size, int64_t seq_len) const override;
  const std::vector<Segment>& segments(Split split) const {
    return split == Split::kTrain ? train_ : validation_;
  }
  int64_t tokens_in(Split split) const;

 protected:
  // Called once by the constructor of a derived class; each split needs at least one segment.
  void set_segments(std::vector<Segment> train, std::vector<Segment> validation);
  void check_cursor(Split split, const Cursor& cursor) const override;

 private:
  std::vector<Segment> train_;
  std::vector<Segment> validation_;
};

// A UTF-8 text file as token ids: its bytes (vocab 256), or the ids of a byte-level BPE tokenizer
// (the whole file encoded as one document; vocab the tokenizer's, at most 65536 so that ids fit
// the uint16 token streams). The last `val_fraction` of the tokens (for bytes: moved forward to a
// character boundary) is the validation split. Byte tokens report bits per byte = loss / ln 2,
// BPE tokens the loss per token (describe() gives bytes per token, their ratio).
class TextDataset final : public TokenStreamDataset {
 public:
  TextDataset(const std::string& path, double val_fraction,
              Tokenizer tokenizer = Tokenizer::bytes());
  std::string describe() const override;
  int64_t vocab_size() const override { return tokenizer_.vocab_size(); }
  Metric metric() const override;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& tokens) const override;
  const Tokenizer* tokenizer() const override { return &tokenizer_; }

 private:
  std::string path_;
  Tokenizer tokenizer_;
  int64_t bytes_ = 0;
};

// llm.c token shards. Validation: the shards of `val_pattern`, or, when it is empty, the last
// `val_fraction` of the training tokens. vocab_size() is the tokenizer's vocabulary when there is
// one (a token id outside it is an error), else the largest token id + 1.
class ShardDataset final : public TokenStreamDataset {
 public:
  ShardDataset(const std::string& pattern, const std::string& val_pattern, double val_fraction,
               std::optional<Tokenizer> tokenizer = std::nullopt);
  std::string describe() const override;
  int64_t vocab_size() const override { return vocab_size_; }
  Metric metric() const override { return Metric::kLoss; }
  // Through the tokenizer; without one, encode throws and decode writes "[50256][13]...".
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& tokens) const override;
  const Tokenizer* tokenizer() const override { return tokenizer_ ? &*tokenizer_ : nullptr; }

 private:
  std::string pattern_;
  std::optional<Tokenizer> tokenizer_;
  int64_t files_ = 0;
  int64_t vocab_size_ = 0;
};

}  // namespace octet::data
