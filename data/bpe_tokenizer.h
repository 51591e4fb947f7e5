// Byte-level BPE (GPT-2, Llama-3 and their kin): loaded from a Hugging Face tokenizer.json or from
// GPT-2's vocab.json + merges.txt, encoded as tiktoken does it (split pattern, then a merge loop
// over one piece at a time), serialized compactly so a checkpoint can carry it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace octet::data {

// The split patterns octet implements (by hand: std::regex lacks \p{L} and \p{N}).
//   kGpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// \s is Unicode's White_Space (as in tiktoken's regex crate). A byte that is not part of valid
// UTF-8 counts as one character that is no letter, number or space, so any bytes encode.
enum class SplitPattern { kGpt2, kLlama3 };

std::string_view split_pattern_name(SplitPattern pattern);   // "gpt2", "llama3"
std::string_view split_pattern_regex(SplitPattern pattern);  // the regex above
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);

namespace detail {

// The ends of the pieces of `text` under `pattern`, as byte offsets: piece i is
// [ends[i-1], ends[i]) with ends[-1] = 0; the last end is text.size().
std::vector<size_t> split_pieces(std::string_view text, SplitPattern pattern);

}  // namespace detail

class BpeTokenizer {
 public:
  // A Hugging Face tokenizer.json: model.type "BPE" (vocab, merges as "a b" strings or [a, b]
  // pairs), added_tokens (matched verbatim before splitting), a ByteLevel pre_tokenizer alone or
  // after a Split with GPT-2's or Llama-3's pattern. Anything else is an error naming the file
  // and the key. encode() adds no BOS/EOS (the post_processor is not applied).
  static BpeTokenizer from_hf_json(const std::string& path);
  // GPT-2's files: vocab.json (encoder.json) and merges.txt (vocab.bpe); GPT-2's pattern;
  // "<|endoftext|>" is a special token and the end-of-sequence id when the vocabulary has it.
  static BpeTokenizer from_vocab_merges(const std::string& vocab_json,
                                        const std::string& merges_txt);

  // Made in code: the 256 byte tokens (id = the byte), then one token per merge of two earlier
  // tokens' bytes (in rank order, ids from 256 on), then the added tokens; "<|endoftext|>" among
  // them is the end-of-sequence token. Listed merges only, as from_hf_json.
  static BpeTokenizer from_merges(SplitPattern pattern,
                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                  const std::vector<std::string>& added = {});

  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of the ids in order; an id outside the vocabulary is an error naming it.
  std::string decode(std::span<const int32_t> ids) const;

  int64_t vocab_size() const;  // max id + 1
  std::optional<int32_t> eos_id() const;
  SplitPattern pattern() const;
  // The bytes of one token (an error for an id outside the vocabulary).
  std::string_view token_bytes(int32_t id) const;

  // A JSON object {"format": "octet-bpe", "version": 1, ...} holding everything encode and
  // decode use; deserialize checks every field and throws octet::Error naming what is wrong.
  std::string serialize() const;
  static BpeTokenizer deserialize(std::string_view text);

 private:
  struct Impl;
  explicit BpeTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable, so copies share it
};

}  // namespace octet::data
