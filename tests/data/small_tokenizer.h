// A small byte-level BPE tokenizer.json for tests of the tokenizer's users (datasets, the CLI):
// GPT-2's split pattern, the 256 byte tokens, a few merges over English letters and
// "<|endoftext|>" as the end-of-sequence token.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "data/bpe_tokenizer.h"
#include "tests/support/scratch_dir.h"

namespace octet::test {

// GPT-2's byte-to-unicode table from its description: printable Latin-1 bytes stand for
// themselves, the other 68 take U+0100 on, in byte order.
inline std::string gpt2_byte_char(int b) {
  const auto printable = [](int k) {
    return (k >= 33 && k <= 126) || (k >= 161 && k <= 172) || k >= 174;
  };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int k = 0; k < b; ++k) cp += printable(k) ? 0 : 1;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | cp >> 6);
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// An "added_tokens" entry of tokenizer.json: a special token matched as written.
inline nlohmann::json special_added_token(const std::string& content, int id) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

enum class ByteLevelRegex { kNo, kYes };

// tokenizer.json's ByteLevel pre-tokenizer; kYes: it splits with GPT-2's pattern itself.
inline nlohmann::json byte_level_pre_tokenizer(ByteLevelRegex regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", regex == ByteLevelRegex::kYes}};
}

// Ids: byte b is b; the merges' results from 256 on, in this order:
//   256 "th"  257 "the"  258 "Ġ" "the" -> "Ġthe"  259 "er"  260 "Ġa"  261 "in"  262 "an"
//   263 "Ġt"  264 "on"   265 "Ġs"
// then "<|endoftext|>" (266).
inline nlohmann::json small_tokenizer_json() {
  using json = nlohmann::json;
  const std::string space = gpt2_byte_char(' ');  // "Ġ"
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_byte_char(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"th", "e"}, {space, "the"}, {"e", "r"}, {space, "a"},
      {"i", "n"}, {"a", "n"},  {space, "t"},   {"o", "n"}, {space, "s"}};
  json merge_list = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(a + " " + b);
  }
  const json added = json::array({special_added_token("<|endoftext|>", id)});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level_pre_tokenizer(ByteLevelRegex::kYes)},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

inline constexpr int kSmallTokenizerVocab = 267;
inline constexpr int kSmallTokenizerEos = 266;

// The file; a `vocab_size` past 267 is spliced in as text (70000 JSON objects take seconds to
// build in a test compiled at -O0).
inline void write_small_tokenizer(const std::string& path, int vocab_size = kSmallTokenizerVocab) {
  std::string text = small_tokenizer_json().dump();
  std::string extra;
  for (int id = kSmallTokenizerVocab; id < vocab_size; ++id) {
    const std::string n = std::to_string(id);
    extra += ",{\"id\":" + n + ",\"content\":\"<|extra_" + n + "|>\",\"special\":true}";
  }
  const size_t list = text.find("\"added_tokens\":[");
  text.insert(text.find(']', list), extra);
  write_file_bytes(path, text);
}
}  // namespace octet::test
