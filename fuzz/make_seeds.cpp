// Writes the fuzzers' starting corpora with octet's own code, so no binary file is kept in the
// repository: checkpoints of a tiny run under every recipe (f32, delayed, current, MXFP8,
// blockwise, NVFP4, with and without FP8 primary weights), the configs those runs wrote, --set
// lines, recipes, token shards, text, data states and BPE inputs.
//   octet_fuzz_seeds OUT_DIR     (OUT_DIR/<harness>/<seed>, for the harnesses in fuzz/)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/dataset.h"
#include "data/token_data.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/recipe.h"
#include "runtime/safetensors.h"
#include "tools/commands.h"

namespace octet::fuzz {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  OCTET_CHECK(in.good(), "cannot read ", path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  OCTET_CHECK(!out.fail(), "cannot write ", path.string());
}

struct Run {
  std::string name;
  std::vector<std::string> sets;
};

// Two steps of a one-layer model on the 4-digit sort task (the checkpoint at the end), kept small:
// a short amax history, 16 tokens of context.
void train_tiny(const fs::path& dir, const Run& run) {
  cli::Args args = {"train", "--quiet",
                    "--out", dir.string(),
                    "--set", "model.n_layer=1",
                    "--set", "model.d_model=32",
                    "--set", "model.n_head=2",
                    "--set", "data.task_digits=4",
                    "--set", "training.steps=2",
                    "--set", "training.batch_size=8",
                    "--set", "training.eval_examples=8",
                    "--set", "training.eval_batches=1",
                    "--set", "schedule.warmup_steps=1"};
  for (const std::string& s : run.sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  std::ostringstream out, err;
  const int code = cli::run_octet(args, out, err);
  OCTET_CHECK(code == 0, "seed run ", run.name, " failed: ", err.str());
}

void make_seeds(const fs::path& root) {
  for (const char* harness : {"checkpoint", "safetensors", "config", "set", "recipe", "token_shard",
                              "text_data", "data_state", "bpe"}) {
    fs::create_directories(root / harness);
  }
  const fs::path runs = root / "runs";
  fs::remove_all(runs);

  const std::string delayed =
      R"(fp8.recipe={"recipe":"delayed","fp8_format":"hybrid","amax_history_len":16})";
  const std::vector<Run> recipes = {
      {"f32", {"fp8.enabled=false"}},
      {"delayed", {delayed}},
      {"delayed_fp8_weights", {delayed, "model.fp8_primary_weights=true"}},
      {"current", {R"(fp8.recipe={"recipe":"current","power_2_scale":true})"}},
      {"mxfp8", {R"(fp8.recipe={"recipe":"mxfp8"})", "model.fp8_primary_weights=true"}},
      {"blockwise", {R"(fp8.recipe={"recipe":"blockwise"})", "model.fp8_primary_weights=true"}},
      {"nvfp4", {R"(fp8.recipe={"recipe":"nvfp4"})", "model.fp8_primary_weights=true"}},
      {"sgd_rmsnorm", {"fp8.enabled=false", "optimizer.kind=sgd", "model.norm=rmsnorm"}},
  };
  for (const Run& run : recipes) {
    const fs::path dir = runs / run.name;
    train_tiny(dir, run);
    const fs::path ckpt = dir / "checkpoint.safetensors";
    // A file octet wrote saves back byte for byte (the safetensors harness checks the same of
    // every file it saved itself).
    const SafetensorsFile file = load_safetensors(ckpt.string());
    const fs::path copy = dir / "copy.safetensors";
    save_safetensors(copy.string(), file.tensors, file.metadata);
    OCTET_CHECK(read_file(ckpt) == read_file(copy), "checkpoint ", ckpt.string(),
                " does not save back byte for byte");
    fs::copy_file(ckpt, root / "checkpoint" / (run.name + ".safetensors"),
                  fs::copy_options::overwrite_existing);
    fs::copy_file(ckpt, root / "safetensors" / (run.name + ".safetensors"),
                  fs::copy_options::overwrite_existing);
    fs::copy_file(dir / "config.json", root / "config" / (run.name + ".json"),
                  fs::copy_options::overwrite_existing);
    write_file(root / "data_state" / (run.name + ".json"), file.metadata.at("data_state"));
  }
  fs::remove_all(runs);

  // safetensors beyond checkpoints: every dtype, empty and scalar tensors, metadata only.
  NamedTensors all;
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kE4M3, DType::kE5M2, DType::kE8M0,
                  DType::kI32, DType::kI64, DType::kU8}) {
    Tensor t = Tensor::zeros({2, 3}, d);
    all.emplace_back(std::string("t_") + std::string(dtype_name(d)), t);
  }
  all.emplace_back("empty", Tensor::zeros({0, 4}, DType::kF32));
  all.emplace_back("scalar", Tensor::from_floats({1.5f}, {}));
  save_safetensors((root / "safetensors" / "dtypes.safetensors").string(), all, {{"k", "v"}});
  save_safetensors((root / "safetensors" / "metadata_only.safetensors").string(), {},
                   {{"format", "octet-checkpoint"}, {"version", "1"}});
  save_safetensors((root / "safetensors" / "nothing.safetensors").string(), {});

  // Configs: the default run's, one with comments and a recipe file path.
  const fs::path source = OCTET_SOURCE_DIR;
  fs::copy_file(source / "configs/train/default.json", root / "config" / "default.json",
                fs::copy_options::overwrite_existing);
  write_file(
      root / "config" / "comments.json",
      "// a comment\n{\"model\": {\"n_layer\": 4 /* four */}, \"training.steps\": 10,\n"
      " \"optimizer\": {\"betas\": [0.9, 0.99]}, \"fp8\": {\"recipe\": \"missing.json\"}}\n");

  // --set lines, one per line.
  const std::vector<std::string> sets = {
      "model.n_layer=4\noptimizer.lr=1e-3",
      "model={\"n_layer\":3,\"d_model\":96,\"n_head\":3}\nfp8.enabled=false",
      "optimizer.betas=[0.9,0.99]\ndata.path=input.txt\ndata.kind=text\nmodel.seq_len=32",
      R"(fp8.recipe={"recipe":"mxfp8"})",
      "fp8.high_precision_modules=[\"layers.0.mlp\",\"layers.*.attn.proj\"]\ntraining.seed=7",
      "training.device=cpu\ntraining.threads=2\noutput.dir=runs/x",
      "data.kind=shards\ndata.path=shards/*.bin\ndata.val_path=val.bin\nmodel.seq_len=64",
      "schedule.total_steps=5000\ntraining.steps=2e3",
  };
  for (size_t i = 0; i < sets.size(); ++i) {
    write_file(root / "set" / ("set" + std::to_string(i) + ".txt"), sets[i]);
  }

  // Recipes: the documented files and every kind with its keys written out.
  for (const auto& entry : fs::directory_iterator(source / "configs/recipes")) {
    fs::copy_file(entry.path(), root / "recipe" / entry.path().filename(),
                  fs::copy_options::overwrite_existing);
  }
  for (const Recipe& r :
       {Recipe::delayed(FP8Format::kE4M3, 2, 16, AmaxComputeAlgo::kMostRecent), Recipe::current(),
        Recipe::mxfp8(), Recipe::blockwise(), Recipe::nvfp4()}) {
    write_file(root / "recipe" / (std::string(recipe_kind_name(r.kind)) + "_all_keys.json"),
               recipe_to_json(r).dump());
  }

  // Token shards: empty, a few tokens, a larger vocabulary.
  data::write_token_shard((root / "token_shard" / "empty.bin").string(), {});
  data::write_token_shard((root / "token_shard" / "small.bin").string(), {1, 2, 3, 4, 5, 6, 7, 8});
  std::vector<uint16_t> tokens;
  for (uint16_t i = 0; i < 200; ++i) tokens.push_back(static_cast<uint16_t>(i * 331 % 50257));
  data::write_token_shard((root / "token_shard" / "gpt2_vocab.bin").string(), tokens);

  // Text: ASCII, multi-byte UTF-8 near the split, too short.
  write_file(root / "text_data" / "ascii.txt", "hello world, hello octet\n");
  write_file(root / "text_data" / "utf8.txt",
             "gr\xC3\xBC\xC3\x9F\x65 \xE2\x82\xAC \xF0\x9F\x98\x80 ok");
  write_file(root / "text_data" / "short.txt", "abc");

  // BPE: text that stresses the split patterns, broken UTF-8, and a small tokenizer's serialized
  // form (the harness reads each input both ways).
  write_file(root / "bpe" / "english.txt",
             "It's 2024; they'RE here--aren't they? 'Tis    the   season!\n\n\tx = 12345\r\n"
             "<|endoftext|>next");
  write_file(
      root / "bpe" / "unicode.txt",
      "\xE4\xBD\xA0\xE5\xA5\xBD caf\xC3\xA9 e\xCC\x81 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE3\x80\x80\xC2\xA0\xD9\xA3\xE2\x85\xAB");
  write_file(root / "bpe" / "broken_utf8.txt",
             "ok \x80\xC0\xAF\xE2\x82 x\xED\xA0\x80\xF4\x90\x80\x80\xFF'\xC5");
  write_file(root / "bpe" / "serialized.json",
             data::BpeTokenizer::from_merges(data::SplitPattern::kLlama3,
                                             {{"t", "h"}, {"th", "e"}, {" ", "the"}, {"'", "s"}},
                                             {"<|endoftext|>"})
                 .serialize());

  // Data states beyond those of the checkpoints.
  data::DataState state;
  state.train = {2, 12345};
  state.validation = {1, 7};
  write_file(root / "data_state" / "state.json", data::encode_state(state));
  write_file(root / "data_state" / "spaced.json",
             "{ \"validation\" : [0, 0], \"train\" : [0, 9007199254740993] }");
}

}  // namespace
}  // namespace octet::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: octet_fuzz_seeds OUT_DIR\n");
    return 2;
  }
  try {
    octet::set_log_level("warn");
    octet::fuzz::make_seeds(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octet_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
