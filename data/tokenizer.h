// The tokenizer a model's text goes through: byte tokens (the id is the byte) or a byte-level BPE.
// A run checkpoint carries it in its serialized form, so the checkpoint alone turns text into the
// model's token ids and back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_tokenizer.h"

namespace octet::data {

enum class TokenizerKind : uint8_t { kBytes, kBpe };

class Tokenizer {
 public:
  // Byte tokens: vocabulary 256, no end-of-sequence id.
  static Tokenizer bytes();
  // `source` names where it came from in describe() and errors ("tokenizer.json").
  static Tokenizer bpe(BpeTokenizer tokenizer, std::string source);
  // A Hugging Face tokenizer.json, or a folder holding tokenizer.json or GPT-2's vocab.json +
  // merges.txt. Anything else is an error naming the path and what was expected.
  static Tokenizer load(const std::string& path);

  TokenizerKind kind() const { return bpe_ ? TokenizerKind::kBpe : TokenizerKind::kBytes; }
  std::vector<int32_t> encode(std::string_view text) const;
  // An id outside the vocabulary is an error naming it.
  std::string decode(std::span<const int32_t> ids) const;
  int64_t vocab_size() const;
  std::optional<int32_t> eos_id() const;
  // "byte tokens" or "byte-level BPE tokenizer (vocab 50257) from SOURCE".
  std::string describe() const;

  // Bytes: {"format":"octet-bytes","version":1}; BPE: BpeTokenizer::serialize(). deserialize
  // checks every field and throws octet::Error naming what is wrong.
  std::string serialize() const;
  static Tokenizer deserialize(std::string_view text, std::string source);

 private:
  std::optional<BpeTokenizer> bpe_;  // none: byte tokens
  std::string source_;
};

}  // namespace octet::data
