// Token shards (layout, every header error), shard patterns, the contiguous-window batches with
// their cursor, train/validation splits, and byte-level UTF-8 text.
#include "data/token_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace octet::data {
namespace {

using test::ScratchDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

using test::error_of;

// Tokens first, first+1, ...: a batch's contents then say exactly where it was cut from.
std::vector<uint16_t> counting(uint16_t first, size_t n) {
  std::vector<uint16_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(first + i);
  return tokens;
}

std::vector<int32_t> values(const Tensor& t) {
  const int32_t* p = t.data_as<int32_t>();
  return {p, p + t.numel()};
}

// The header of an llm.c shard, written here from the format description.
std::string shard_header(int32_t magic, int32_t version, int32_t count) {
  std::string header(1024, '\0');
  const int32_t fields[] = {magic, version, count};
  std::memcpy(header.data(), fields, sizeof(fields));
  return header;
}

std::string tokens_bytes(const std::vector<uint16_t>& tokens) {
  return {reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2};
}

TEST(TokenShard, WritesTheLlmcLayoutAndReadsItBack) {
  ScratchDir dir;
  const std::string path = dir.file("a.bin");
  const std::vector<uint16_t> tokens = {50256, 0, 1, 65535, 300};
  write_token_shard(path, tokens);
  EXPECT_EQ(test::read_file_bytes(path), shard_header(20240520, 1, 5) + tokens_bytes(tokens));
  const auto shard = TokenShard::open(path);
  EXPECT_EQ(shard->path(), path);
  ASSERT_EQ(shard->size(), 5);
  EXPECT_EQ(std::vector<uint16_t>(shard->tokens(), shard->tokens() + 5), tokens);
  write_token_shard(path, {});
  EXPECT_EQ(TokenShard::open(path)->size(), 0);
}

TEST(TokenShard, EveryHeaderErrorNamesFileFieldValueAndExpectation) {
  ScratchDir dir;
  const std::string path = dir.file("bad.bin");
  const std::string body = tokens_bytes(counting(0, 10));
  struct Case {
    std::string bytes;
    std::string message;
  };
  const Case cases[] = {
      {std::string(100, '\0'), "is 100 bytes, shorter than the 1024-byte header (256 int32)"},
      {shard_header(20240521, 1, 10) + body,
       "header[0] (magic) is 20240521, expected 20240520 (not an llm.c token shard)"},
      {shard_header(20240520, 2, 10) + body, "header[1] (version) is 2, expected 1"},
      {shard_header(20240520, 1, -3) + body,
       "header[2] (token count) is -3, expected a count >= 0"},
      {shard_header(20240520, 1, 12) + body,
       "header[2] (token count) is 12, so the file should be 1024 + 2 * 12 = 1048 bytes, but it "
       "is 1044 bytes"},
      {shard_header(20240520, 1, 10) + body + "x",
       "header[2] (token count) is 10, so the file should be 1024 + 2 * 10 = 1044 bytes, but it "
       "is 1045 bytes"},
  };
  for (const Case& c : cases) {
    test::write_file_bytes(path, c.bytes);
    EXPECT_THAT(error_of([&] { TokenShard::open(path); }),
                AllOf(HasSubstr("token shard " + path), HasSubstr(c.message)));
  }
  EXPECT_THAT(error_of([&] { TokenShard::open(dir.file("missing.bin")); }),
              AllOf(HasSubstr("cannot open token shard " + dir.file("missing.bin")),
                    HasSubstr("No such file or directory")));
  EXPECT_THAT(error_of([&] { TokenShard::open(dir.path().string()); }),
              HasSubstr("is not a regular file"));
}

TEST(TokenShard, PatternsDirectoriesAndSingleFiles) {
  ScratchDir dir;
  for (const char* name : {"train_002.bin", "train_000.bin", "train_001.bin", "val_000.bin"}) {
    write_token_shard(dir.file(name), counting(0, 4));
  }
  test::write_file_bytes(dir.file("notes.txt"), "not a shard");
  EXPECT_EQ(expand_shard_paths(dir.file("train_*.bin")),
            (std::vector<std::string>{dir.file("train_000.bin"), dir.file("train_001.bin"),
                                      dir.file("train_002.bin")}));
  EXPECT_EQ(expand_shard_paths(dir.path().string()).size(), 4u);  // *.bin only, sorted
  EXPECT_EQ(expand_shard_paths(dir.path().string()).front(), dir.file("train_000.bin"));
  EXPECT_EQ(expand_shard_paths(dir.file("val_000.bin")),
            std::vector<std::string>{dir.file("val_000.bin")});
  EXPECT_THAT(error_of([&] { expand_shard_paths(dir.file("test_*.bin")); }),
              HasSubstr("no token shard matches the pattern " + dir.file("test_*.bin")));
  EXPECT_THAT(error_of([&] { expand_shard_paths(dir.file("x.bin")); }),
              HasSubstr("token shard " + dir.file("x.bin") + " does not exist"));
  ScratchDir empty;
  EXPECT_THAT(error_of([&] { expand_shard_paths(empty.path().string()); }),
              HasSubstr("holds no *.bin file"));
}

TEST(ShardDataset, BatchesAreContiguousWindowsWithShiftedTargets) {
  ScratchDir dir;
  write_token_shard(dir.file("train.bin"), counting(0, 100));
  write_token_shard(dir.file("val.bin"), counting(1000, 50));
  ShardDataset data(dir.file("train.bin"), dir.file("val.bin"), 0.1);
  EXPECT_EQ(data.vocab_size(), 1050);  // the largest id over train and validation, plus one
  EXPECT_EQ(data.metric(), Metric::kLoss);
  EXPECT_EQ(data.natural_seq_len(), 0);

  // B=2, T=5: batch k reads tokens [10k, 10k + 11).
  for (int k = 0; k < 9; ++k) {
    const Batch batch = data.next_batch(Split::kTrain, 2, 5);
    ASSERT_EQ(batch.inputs.shape(), (Shape{2, 5}));
    ASSERT_EQ(batch.inputs.dtype(), DType::kI32);
    std::vector<int32_t> want_in(10), want_out(10);
    for (int i = 0; i < 10; ++i) {
      want_in[static_cast<size_t>(i)] = 10 * k + i;
      want_out[static_cast<size_t>(i)] = 10 * k + i + 1;
    }
    EXPECT_EQ(values(batch.inputs), want_in) << "batch " << k;
    EXPECT_EQ(values(batch.targets), want_out) << "batch " << k;
  }
  // Tokens [90, 101) do not exist: the stream starts over.
  EXPECT_EQ(values(data.next_batch(Split::kTrain, 2, 5).inputs)[0], 0);
  EXPECT_EQ(data.batches_per_pass(Split::kTrain, 2, 5), 9);
  // Validation has its own cursor.
  EXPECT_EQ(values(data.next_batch(Split::kValidation, 1, 4).inputs),
            (std::vector<int32_t>{1000, 1001, 1002, 1003}));
  EXPECT_EQ(data.state().train, (Cursor{0, 10}));
  EXPECT_EQ(data.state().validation, (Cursor{0, 4}));
  data.rewind(Split::kValidation);
  EXPECT_EQ(data.state().validation, Cursor{});
}

TEST(ShardDataset, MovesToTheNextShardWhenABatchDoesNotFit) {
  ScratchDir dir;
  write_token_shard(dir.file("s0.bin"), counting(0, 25));
  write_token_shard(dir.file("s1.bin"), counting(100, 8));  // too short for a batch: skipped
  write_token_shard(dir.file("s2.bin"), counting(200, 23));
  ShardDataset data(dir.file("s*.bin"), dir.file("s0.bin"), 0.1);
  std::vector<int32_t> firsts;
  for (int k = 0; k < 6; ++k)
    firsts.push_back(values(data.next_batch(Split::kTrain, 1, 10).inputs)[0]);
  EXPECT_EQ(firsts, (std::vector<int32_t>{0, 10, 200, 210, 0, 10}));
  EXPECT_EQ(data.batches_per_pass(Split::kTrain, 1, 10), 4);
  EXPECT_THAT(error_of([&] { data.next_batch(Split::kTrain, 3, 10); }),
              AllOf(HasSubstr("train data of token shards"),
                    HasSubstr("has no segment of 31 tokens for a batch of 3 x 10"),
                    HasSubstr("the largest holds 25")));
}

TEST(ShardDataset, HeldOutTailWithoutValidationShards) {
  ScratchDir dir;
  write_token_shard(dir.file("s0.bin"), counting(0, 60));
  write_token_shard(dir.file("s1.bin"), counting(60, 40));
  ShardDataset data(dir.file("s*.bin"), "", 0.25);  // 100 tokens: the last 25 are held out
  EXPECT_EQ(data.tokens_in(Split::kTrain), 75);
  EXPECT_EQ(data.tokens_in(Split::kValidation), 25);
  ASSERT_EQ(data.segments(Split::kTrain).size(), 2u);
  ASSERT_EQ(data.segments(Split::kValidation).size(), 1u);
  EXPECT_EQ(data.segments(Split::kValidation)[0].name, dir.file("s1.bin") + " tokens [15, 40)");
  EXPECT_EQ(values(data.next_batch(Split::kValidation, 2, 4).inputs),
            (std::vector<int32_t>{75, 76, 77, 78, 79, 80, 81, 82}));
  EXPECT_THAT(data.describe(), AllOf(HasSubstr("2 files"), HasSubstr("75 train and 25 "
                                                                     "validation tokens")));
}

TEST(ShardDataset, StateRestoresTheSameBatches) {
  ScratchDir dir;
  write_token_shard(dir.file("s0.bin"), counting(0, 57));
  write_token_shard(dir.file("s1.bin"), counting(500, 41));
  ShardDataset first(dir.file("s*.bin"), "", 0.1);
  for (int k = 0; k < 5; ++k) first.next_batch(Split::kTrain, 2, 6);
  first.next_batch(Split::kValidation, 1, 3);
  const DataState saved = first.state();
  EXPECT_EQ(decode_state(encode_state(saved)), saved);

  ShardDataset resumed(dir.file("s*.bin"), "", 0.1);
  resumed.set_state(decode_state(encode_state(saved)));
  for (int k = 0; k < 12; ++k) {
    const Batch a = first.next_batch(Split::kTrain, 2, 6);
    const Batch b = resumed.next_batch(Split::kTrain, 2, 6);
    EXPECT_EQ(values(a.inputs), values(b.inputs)) << "batch " << k;
    EXPECT_EQ(values(a.targets), values(b.targets)) << "batch " << k;
  }
  EXPECT_EQ(values(first.next_batch(Split::kValidation, 1, 3).inputs),
            values(resumed.next_batch(Split::kValidation, 1, 3).inputs));

  DataState bad = saved;
  bad.train.segment = 7;
  EXPECT_THAT(error_of([&] { resumed.set_state(bad); }),
              AllOf(HasSubstr("train cursor (segment 7, position"),
                    HasSubstr("the checkpoint was made with other data")));
  bad = saved;
  bad.validation.position = 1000;
  EXPECT_THAT(error_of([&] { resumed.set_state(bad); }),
              HasSubstr("validation cursor (segment 0, position 1000)"));
}

TEST(ShardDataset, TooFewTokensOrEmptyShards) {
  ScratchDir dir;
  write_token_shard(dir.file("tiny.bin"), counting(0, 3));
  EXPECT_THAT(error_of([&] { ShardDataset(dir.file("tiny.bin"), "", 0.1); }),
              HasSubstr("hold 3 tokens: too few for a train and a validation split"));
  write_token_shard(dir.file("empty.bin"), {});
  write_token_shard(dir.file("ok.bin"), counting(0, 10));
  EXPECT_THAT(error_of([&] { ShardDataset(dir.file("ok.bin"), dir.file("empty.bin"), 0.1); }),
              HasSubstr("validation token shards " + dir.file("empty.bin") + " hold no tokens"));
}

TEST(TextDataset, BytesAreTokensAndTheTailIsHeldOut) {
  ScratchDir dir;
  const std::string path = dir.file("t.txt");
  std::string text;
  for (int i = 0; i < 20; ++i) text += "hello world ";
  test::write_file_bytes(path, text);  // 240 bytes
  TextDataset data(path, 0.25);
  EXPECT_EQ(data.vocab_size(), 256);
  EXPECT_EQ(data.metric(), Metric::kBitsPerByte);
  EXPECT_EQ(data.tokens_in(Split::kTrain), 180);
  EXPECT_EQ(data.tokens_in(Split::kValidation), 60);
  const Batch batch = data.next_batch(Split::kTrain, 2, 3);
  EXPECT_EQ(values(batch.inputs), (std::vector<int32_t>{'h', 'e', 'l', 'l', 'o', ' '}));
  EXPECT_EQ(values(batch.targets), (std::vector<int32_t>{'e', 'l', 'l', 'o', ' ', 'w'}));
  // Validation starts at byte 180 = 15 * 12: "hello world " again.
  EXPECT_EQ(values(data.next_batch(Split::kValidation, 1, 5).inputs),
            (std::vector<int32_t>{'h', 'e', 'l', 'l', 'o'}));
  EXPECT_EQ(data.encode("hé"), (std::vector<int32_t>{'h', 0xC3, 0xA9}));
  EXPECT_EQ(data.decode({'h', 0xC3, 0xA9}), "hé");
  EXPECT_THAT(error_of([&] { data.decode({300}); }), HasSubstr("token id 300 is not a byte"));
  EXPECT_THAT(data.describe(), AllOf(HasSubstr(path), HasSubstr("240 bytes")));
}

TEST(TextDataset, SplitNeverCutsACharacter) {
  ScratchDir dir;
  const std::string path = dir.file("u.txt");
  // 10 three-byte characters: a 10% tail would start at byte 27, which is a character start, so
  // use 0.12 (cut at 30 - 4 = 26, mid-character) and expect the cut moved to 27.
  std::string text;
  for (int i = 0; i < 10; ++i) text += "€";
  test::write_file_bytes(path, text);
  TextDataset data(path, 0.12);
  EXPECT_EQ(data.tokens_in(Split::kTrain), 27);
  EXPECT_EQ(data.tokens_in(Split::kValidation), 3);
  EXPECT_EQ(values(data.next_batch(Split::kValidation, 1, 2).inputs),
            (std::vector<int32_t>{0xE2, 0x82}));
}

TEST(TextDataset, ClearErrors) {
  ScratchDir dir;
  EXPECT_THAT(error_of([&] { TextDataset(dir.file("none.txt"), 0.1); }),
              AllOf(HasSubstr("cannot open text file " + dir.file("none.txt")),
                    HasSubstr("No such file or directory")));
  const std::string path = dir.file("bad.txt");
  const std::pair<std::string, std::string> invalid[] = {
      {std::string("abc\xff") + "defgh", "byte 0xff at offset 3"},
      {std::string("abcd\xc0\x80") + "xyz", "byte 0xc0 at offset 4"},       // overlong NUL
      {std::string("ab\xed\xa0\x80") + "xyz", "byte 0xed at offset 2"},     // a surrogate
      {std::string("abcdef\xe2\x82"), "byte 0xe2 at offset 6"},             // cut short
      {std::string("a\xf4\x90\x80\x80") + "bcd", "byte 0xf4 at offset 1"},  // past U+10FFFF
  };
  for (const auto& [bytes, message] : invalid) {
    test::write_file_bytes(path, bytes);
    EXPECT_THAT(error_of([&] { TextDataset(path, 0.1); }),
                AllOf(HasSubstr("text file " + path + " is not valid UTF-8"), HasSubstr(message)));
  }
  test::write_file_bytes(path, "ab");
  EXPECT_THAT(error_of([&] { TextDataset(path, 0.1); }),
              HasSubstr("has 2 bytes: too few for a train and a validation split"));
  test::write_file_bytes(path, "hello world");
  TextDataset small(path, 0.1);
  EXPECT_THAT(error_of([&] { small.next_batch(Split::kTrain, 4, 8); }),
              HasSubstr("has no segment of 33 tokens for a batch of 4 x 8"));
}

TEST(DataState, EncodesAsCompactJsonAndRejectsMalformedText) {
  const DataState state{{2, 12345}, {0, 77}};
  EXPECT_EQ(encode_state(state), R"({"train":[2,12345],"validation":[0,77]})");
  EXPECT_EQ(decode_state(encode_state(state)), state);
  EXPECT_THAT(error_of([] { decode_state("{"); }), HasSubstr("is not valid JSON"));
  EXPECT_THAT(error_of([] { decode_state(R"({"train":[0,1]})"); }),
              HasSubstr("has no \"validation\" cursor"));
  EXPECT_THAT(error_of([] { decode_state(R"({"train":[0,-1],"validation":[0,0]})"); }),
              HasSubstr("\"train\" must be [segment, position] with non-negative integers"));
  EXPECT_THAT(error_of([] { decode_state(R"({"train":[0,1],"validation":[0,0],"x":1})"); }),
              HasSubstr("has keys other than"));
}

}  // namespace
}  // namespace octet::data
