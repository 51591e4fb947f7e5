// data::Tokenizer (byte tokens or a BPE from tokenizer files, and the serialized form checkpoints
// carry) and the datasets that use one: text through a BPE tokenizer, shards with a tokenizer.
#include "data/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/token_data.h"
#include "tests/data/small_tokenizer.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace octet::data {
namespace {

using test::error_of;
using test::ScratchDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The small tokenizer of small_tokenizer.h as GPT-2's two files in `dir`.
void write_vocab_merges(const ScratchDir& dir, const std::string& folder) {
  const nlohmann::json j = test::small_tokenizer_json();
  nlohmann::json vocab = j["model"]["vocab"];
  vocab["<|endoftext|>"] = test::kSmallTokenizerEos;
  std::string merges = "#version: 0.2\n";
  for (const auto& m : j["model"]["merges"]) merges += m.get<std::string>() + "\n";
  std::filesystem::create_directories(dir.file(folder));
  test::write_file_bytes(dir.file(folder + "/vocab.json"), vocab.dump());
  test::write_file_bytes(dir.file(folder + "/merges.txt"), merges);
}

// Worked out by hand from the merge ranks: "the" -> t h e -> th e -> the (257); " then" ->
// Ġ t h e n -> Ġ th e n -> Ġ the n -> Ġthe n (258, 110); " an" -> Ġ a n -> Ġa n (260, 110):
// rank 4 (Ġ a) comes before rank 6 (a n).
const std::vector<int32_t> kTheThenAn = {257, 258, 110, 260, 110};

TEST(Tokenizer, LoadsATokenizerJsonOrAFolderOfEitherForm) {
  ScratchDir dir;
  test::write_small_tokenizer(dir.file("tokenizer.json"));
  std::filesystem::create_directories(dir.file("hf"));
  test::write_small_tokenizer(dir.file("hf/tokenizer.json"));
  write_vocab_merges(dir, "gpt2");
  for (const std::string& path : {dir.file("tokenizer.json"), dir.file("hf"), dir.file("gpt2")}) {
    SCOPED_TRACE(path);
    const Tokenizer t = Tokenizer::load(path);
    EXPECT_EQ(t.kind(), TokenizerKind::kBpe);
    EXPECT_EQ(t.vocab_size(), test::kSmallTokenizerVocab);
    EXPECT_EQ(t.eos_id(), test::kSmallTokenizerEos);
    EXPECT_EQ(t.encode("the then an"), kTheThenAn);
    EXPECT_EQ(t.decode(kTheThenAn), "the then an");
    EXPECT_THAT(t.describe(), AllOf(HasSubstr("vocab 267"), HasSubstr(path)));
  }
}

TEST(Tokenizer, BadPathsAndFilesNameThePath) {
  ScratchDir dir;
  EXPECT_THAT(error_of([&] { Tokenizer::load(dir.file("none")); }),
              AllOf(HasSubstr(dir.file("none")), HasSubstr("does not exist")));
  std::filesystem::create_directories(dir.file("half"));
  test::write_file_bytes(dir.file("half/vocab.json"), "{}");
  EXPECT_THAT(error_of([&] { Tokenizer::load(dir.file("half")); }),
              AllOf(HasSubstr(dir.file("half")), HasSubstr("no merges.txt")));
  std::filesystem::create_directories(dir.file("empty"));
  EXPECT_THAT(error_of([&] { Tokenizer::load(dir.file("empty")); }),
              HasSubstr("holds neither tokenizer.json nor vocab.json + merges.txt"));
  const std::string whole = test::small_tokenizer_json().dump();
  test::write_file_bytes(dir.file("cut.json"), whole.substr(0, whole.size() / 2));
  EXPECT_THAT(error_of([&] { Tokenizer::load(dir.file("cut.json")); }),
              HasSubstr(dir.file("cut.json")));
  EXPECT_THAT(error_of([&] { Tokenizer::load(""); }), HasSubstr("empty path"));
}

TEST(Tokenizer, BytesAreTheirOwnIds) {
  const Tokenizer t = Tokenizer::bytes();
  EXPECT_EQ(t.kind(), TokenizerKind::kBytes);
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.eos_id(), std::nullopt);
  EXPECT_EQ(t.encode("a\xC3\xA9"), (std::vector<int32_t>{97, 0xC3, 0xA9}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{104, 105}), "hi");
  EXPECT_THAT(error_of([&] {
                t.decode(std::vector<int32_t>{104, 256});
              }),
              HasSubstr("token id 256 is not a byte"));
}

TEST(Tokenizer, SerializedFormRoundTripsAndHostileFormsFailCleanly) {
  ScratchDir dir;
  test::write_small_tokenizer(dir.file("tokenizer.json"));
  const Tokenizer bpe = Tokenizer::load(dir.file("tokenizer.json"));
  const Tokenizer back = Tokenizer::deserialize(bpe.serialize(), "test");
  EXPECT_EQ(back.kind(), TokenizerKind::kBpe);
  EXPECT_EQ(back.serialize(), bpe.serialize());
  EXPECT_EQ(back.encode("the then an"), kTheThenAn);
  EXPECT_EQ(back.eos_id(), test::kSmallTokenizerEos);
  const Tokenizer bytes = Tokenizer::deserialize(Tokenizer::bytes().serialize(), "test");
  EXPECT_EQ(bytes.kind(), TokenizerKind::kBytes);
  EXPECT_EQ(Tokenizer::bytes().serialize(), R"({"format":"octet-bytes","version":1})");

  const std::string good = bpe.serialize();
  for (const std::string& text :
       {std::string(), std::string("[]"), std::string("{}"), std::string("{\"format\":3}"),
        std::string(R"({"format":"octet-bytes"})"),
        std::string(R"({"format":"octet-bytes","version":2})"),
        std::string(R"({"format":"octet-bytes","version":1,"x":0})"),
        std::string(R"({"format":"octet-bpe"})"), std::string(R"({"format":"sentencepiece"})"),
        good.substr(0, good.size() / 2), std::string("\xFF\xFE")}) {
    SCOPED_TRACE(text.substr(0, 60));
    EXPECT_THAT(error_of([&] { Tokenizer::deserialize(text, "checkpoint x.safetensors"); }),
                HasSubstr("serialized tokenizer"));
  }
}

TEST(TextDataset, ThroughABpeTokenizerHoldsTheTokensOfTheWholeFile) {
  ScratchDir dir;
  test::write_small_tokenizer(dir.file("tokenizer.json"));
  const Tokenizer tok = Tokenizer::load(dir.file("tokenizer.json"));
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the then an in on other. ";
  test::write_file_bytes(dir.file("t.txt"), text);
  TextDataset d(dir.file("t.txt"), 0.25, tok);
  EXPECT_EQ(d.vocab_size(), test::kSmallTokenizerVocab);
  EXPECT_EQ(d.metric(), Metric::kLoss);
  EXPECT_THAT(d.describe(), AllOf(HasSubstr("bytes per token"), HasSubstr("vocab 267")));
  std::vector<int32_t> held;
  for (const Split s : {Split::kTrain, Split::kValidation}) {
    for (const Segment& seg : d.segments(s))
      held.insert(held.end(), seg.tokens, seg.tokens + seg.size);
  }
  const std::vector<int32_t> want = tok.encode(text);
  EXPECT_EQ(held, want);
  EXPECT_EQ(d.tokens_in(Split::kValidation), std::llround(0.25 * static_cast<double>(want.size())));
  EXPECT_EQ(d.encode("the then an"), kTheThenAn);
  EXPECT_EQ(d.decode(kTheThenAn), "the then an");
  ASSERT_NE(d.tokenizer(), nullptr);
  EXPECT_EQ(d.tokenizer()->serialize(), tok.serialize());

  // The byte-level dataset is as before: vocab 256, bits per byte, a byte tokenizer to carry.
  TextDataset bytes(dir.file("t.txt"), 0.25);
  EXPECT_EQ(bytes.vocab_size(), 256);
  EXPECT_EQ(bytes.metric(), Metric::kBitsPerByte);
  ASSERT_NE(bytes.tokenizer(), nullptr);
  EXPECT_EQ(bytes.tokenizer()->kind(), TokenizerKind::kBytes);
}

TEST(TextDataset, AVocabularyPastUint16IsRefusedNamingItsSize) {
  ScratchDir dir;
  test::write_small_tokenizer(dir.file("big.json"), 70001);
  const Tokenizer big = Tokenizer::load(dir.file("big.json"));
  ASSERT_EQ(big.vocab_size(), 70001);
  test::write_file_bytes(dir.file("t.txt"), "the then an in on other");
  EXPECT_THAT(error_of([&] { TextDataset(dir.file("t.txt"), 0.25, big); }),
              AllOf(HasSubstr("70001 ids"), HasSubstr("65536")));
  test::write_file_bytes(dir.file("short.txt"), "the");
  test::write_small_tokenizer(dir.file("small.json"));
  EXPECT_THAT(error_of([&] {
                TextDataset(dir.file("short.txt"), 0.25, Tokenizer::load(dir.file("small.json")));
              }),
              AllOf(HasSubstr("encodes to 1 tokens"), HasSubstr("too few")));
}

TEST(ShardDataset, WithATokenizerTakesItsVocabularyAndRefusesIdsOutsideIt) {
  ScratchDir dir;
  test::write_small_tokenizer(dir.file("tokenizer.json"));
  const Tokenizer tok = Tokenizer::load(dir.file("tokenizer.json"));
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 256; ++i) tokens.push_back(static_cast<uint16_t>(i % 100));
  write_token_shard(dir.file("a.bin"), tokens);
  ShardDataset with(dir.file("a.bin"), "", 0.25, tok);
  EXPECT_EQ(with.vocab_size(), test::kSmallTokenizerVocab);  // not the data's 100
  EXPECT_EQ(with.encode("the then an"), kTheThenAn);
  EXPECT_EQ(with.decode(kTheThenAn), "the then an");
  ShardDataset without(dir.file("a.bin"), "", 0.25);
  EXPECT_EQ(without.vocab_size(), 100);
  EXPECT_EQ(without.tokenizer(), nullptr);
  EXPECT_THAT(error_of([&] { without.encode("x"); }), HasSubstr("no tokenizer"));

  tokens[10] = 300;
  write_token_shard(dir.file("b.bin"), tokens);
  EXPECT_THAT(
      error_of([&] { ShardDataset(dir.file("b.bin"), "", 0.25, tok); }),
      AllOf(HasSubstr("token id 300"), HasSubstr("outside the vocabulary"), HasSubstr("267 ids")));
}

TEST(OpenDataset, TakesATokenizerPathOrATokenizerAndRefusesOneForTasks) {
  ScratchDir dir;
  test::write_small_tokenizer(dir.file("tokenizer.json"));
  test::write_file_bytes(dir.file("t.txt"), "the then an in on other, the then an in on other");
  DataOptions o;
  o.kind = DataKind::kText;
  o.path = dir.file("t.txt");
  o.tokenizer_path = dir.file("tokenizer.json");
  EXPECT_EQ(open_dataset(o)->vocab_size(), test::kSmallTokenizerVocab);
  // A tokenizer given whole wins over the path (a checkpoint's, when the file is gone).
  o.tokenizer_path = dir.file("gone.json");
  o.tokenizer = Tokenizer::bytes();
  EXPECT_EQ(open_dataset(o)->vocab_size(), 256);
  o.tokenizer.reset();
  EXPECT_THAT(error_of([&] { open_dataset(o); }), HasSubstr("gone.json"));
  DataOptions task;
  task.tokenizer_path = dir.file("tokenizer.json");
  EXPECT_THAT(error_of([&] { open_dataset(task); }), HasSubstr("the built-in tasks have"));
}

}  // namespace
}  // namespace octet::data
