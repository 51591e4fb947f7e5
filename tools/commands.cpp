// Command-line parsing and the train / eval / generate / tokenize / inspect / import / export
// commands.
#include "tools/commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <regex>

#include "autograd/grad_mode.h"
#include "data/task_data.h"
#include "data/token_data.h"
#include "data/tokenizer.h"
#include "modules/fp8_autocast.h"
#include "runtime/comm.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/parallel.h"
#include "runtime/text_file.h"
#include "tools/bench.h"
#include "tools/checkpoint.h"
#include "tools/inspect.h"
#include "tools/metrics.h"
#include "tools/number_args.h"
#include "tools/run.h"

namespace octet::cli {
namespace {

// ---- arguments ----

enum class Takes : uint8_t { kFlag, kValue };
struct OptionSpec {
  std::string_view name;  // "--config"
  Takes takes;
};

struct Parsed {
  std::map<std::string, std::vector<std::string>, std::less<>> options;
  std::vector<std::string> positional;
  bool has(std::string_view name) const { return options.find(name) != options.end(); }
  std::optional<std::string> value(std::string_view name) const {
    auto it = options.find(name);
    if (it == options.end()) return std::nullopt;
    return it->second.back();
  }
  std::vector<std::string> values(std::string_view name) const {
    auto it = options.find(name);
    return it == options.end() ? std::vector<std::string>{} : it->second;
  }
};

// "--name value" and "--name=value"; --help anywhere. Anything unknown is an error naming it.
Parsed parse(const Args& args, std::string_view command, std::initializer_list<OptionSpec> specs) {
  Parsed parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--help" || word == "-h") {
      parsed.options["--help"].push_back("");
      continue;
    }
    if (!word.starts_with("-") || word == "-") {
      parsed.positional.push_back(word);
      continue;
    }
    const size_t eq = word.find('=');
    const std::string name = word.substr(0, eq);
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    OCTET_CHECK(spec != nullptr, "octet ", command, ": unknown option ", name, " (see octet ",
                command, " --help)");
    if (spec->takes == Takes::kFlag) {
      OCTET_CHECK(eq == std::string::npos, "octet ", command, ": ", name, " takes no value");
      parsed.options[name].push_back("");
    } else if (eq != std::string::npos) {
      parsed.options[name].push_back(word.substr(eq + 1));
    } else {
      OCTET_CHECK(i + 1 < args.size(), "octet ", command, ": ", name, " needs a value (see octet ",
                  command, " --help)");
      parsed.options[name].push_back(args[++i]);
    }
  }
  return parsed;
}

// Prints the command's help when --help was given: then the command has nothing else to do.
bool printed_help(const Parsed& p, std::string_view command, std::ostream& out) {
  if (!p.has("--help")) return false;
  out << help_text(command);
  return true;
}

void no_positional(const Parsed& p, std::string_view command) {
  OCTET_CHECK(p.positional.empty(), "octet ", command, ": unexpected argument \"",
              p.positional.empty() ? "" : p.positional.front(), "\" (see octet ", command,
              " --help)");
}

std::string required(const Parsed& p, std::string_view name, std::string_view command) {
  auto v = p.value(name);
  OCTET_CHECK(v.has_value() && !v->empty(), "octet ", command, ": ", name,
              " is required (see octet ", command, " --help)");
  return *v;
}

// ---- the model of a checkpoint ----

// The config a checkpoint was trained with, with `sets` applied. model.* must stay; fp8.* may
// change only for a checkpoint of high-precision weights (fp8.enabled=false), which any recipe
// can then run.
config::RunConfig checkpoint_config(const cli::Checkpoint& ckpt,
                                    const std::vector<std::string>& sets) {
  const config::RunConfig& saved = ckpt.state.config;
  config::RunConfig c = saved;
  for (const std::string& s : sets) config::apply_override(c, s);
  OCTET_CHECK(c.model == saved.model, "--set cannot change model.* of a trained checkpoint (",
              ckpt.path, ")");
  OCTET_CHECK(c.fp8 == saved.fp8 || !saved.fp8.enabled, "--set cannot change fp8.* of ", ckpt.path,
              ": it was trained under an FP8 recipe, and only a checkpoint of "
              "high-precision weights (fp8.enabled=false) may run under another");
  // The vocabulary and length the weights were trained with, whatever data is given now.
  cli::complete_model_keys(c, ckpt);
  config::validate(c);
  return c;
}

enum class DataUse : uint8_t {
  kOpen,  // the checkpoint's data (or --data): for eval
  kText,  // text prompts: the checkpoint's tokenizer, no data file (a task's, which reads none)
  kNone,  // no data: token ids only
};

struct LoadedModel {
  config::RunConfig config;
  std::unique_ptr<data::Dataset> dataset;
  std::optional<data::Tokenizer> tokenizer;  // DataUse::kText of a model trained on text
  std::unique_ptr<modules::GPT> model;
  int64_t step = 0;
  train::HfExportOptions hf_tokens;  // the token ids of an imported model, for export
};

// Builds and loads the model in inference mode (the caller holds the guard): FP8 primary weights
// are made row-wise only, and nothing records autograd state.
LoadedModel load_model(const std::string& path, const std::vector<std::string>& sets,
                       const std::optional<std::string>& data_path, DataUse use = DataUse::kOpen) {
  const cli::Checkpoint ckpt = cli::read_checkpoint(path);
  config::RunConfig c = checkpoint_config(ckpt, sets);
  LoadedModel m;
  // The checkpoint's own tokenizer, so that neither data.path nor data.tokenizer need exist.
  const std::optional<data::Tokenizer> tokenizer = cli::checkpoint_tokenizer(ckpt);
  if (use == DataUse::kText && c.data.kind == "task") use = DataUse::kOpen;
  if (use == DataUse::kText) {
    OCTET_CHECK(tokenizer.has_value(), "checkpoint ", path,
                " carries no tokenizer (it was trained on token shards without data.tokenizer), "
                "so --prompt text has no token ids: give --prompt-ids");
    m.tokenizer = tokenizer;
  }
  if (use != DataUse::kOpen) {
    m.model = std::make_unique<modules::GPT>(cli::gpt_config_without_data(c));
  }
  if (data_path) {
    OCTET_CHECK(c.data.kind != "task", "--data: checkpoint ", path,
                " was trained on the built-in task (", c.data.task,
                "), which reads no file; --data is for text and shard checkpoints");
    c.data.path = *data_path;
    // A shard run with its own validation shards evaluates on them; --data replaces them, so
    // the file named is the file evaluated (all of it, as the run's val_path was).
    if (!c.data.val_path.empty()) c.data.val_path = *data_path;
  }
  if (use == DataUse::kOpen) {
    data::DataOptions options = config::data_options(c);
    if (tokenizer) options.tokenizer = tokenizer;
    m.dataset = data::open_dataset(options);
    m.model = std::make_unique<modules::GPT>(cli::gpt_config(c, *m.dataset));
  }
  if (c.fp8 == ckpt.state.config.fp8) {
    cli::load_model_state(*m.model, ckpt);
  } else {
    // High-precision weights under a recipe chosen now: the FP8 metas start fresh.
    train::load_parameter_values(*m.model, ckpt.model);
  }
  m.model->eval();
  const int64_t vocab = m.model->config().vocab_size;
  OCTET_CHECK(!m.tokenizer || m.tokenizer->vocab_size() <= vocab, "checkpoint ", path, ": its ",
              m.tokenizer ? m.tokenizer->describe() : "", " has ",
              m.tokenizer ? m.tokenizer->vocab_size() : 0,
              " ids, more than the model's vocabulary of ", vocab);
  m.config = std::move(c);
  m.step = ckpt.state.step;
  m.hf_tokens = cli::hf_export_options(ckpt);
  return m;
}

std::string memory_line(modules::GPT& model, int64_t cache_bytes) {
  int64_t rowwise = 0, columnwise = 0, high = 0;
  for (const modules::Parameter& p : model.parameters()) {
    if (!p.is_fp8()) {
      high += static_cast<int64_t>(p.tensor->nbytes());
      continue;
    }
    // Every byte of the weight: what only one usage reads counts with it, a scale both read
    // (per-tensor scale_inv) with the row-wise data inference keeps.
    const QuantizedTensor& q = **p.fp8;
    const auto column = static_cast<int64_t>(q.nbytes(Usage::kColumnwise));
    rowwise += static_cast<int64_t>(q.nbytes()) - column;
    columnwise += column;
  }
  const MemoryStats s = memory_stats();
  return fmt::format(
      "memory (inference mode): weights {} FP8 row-wise, {} FP8 column-wise, {} high precision; "
      "key/value cache {}; peak {} in all, {} saved for backward, {} optimizer state",
      cli::format_bytes(rowwise), cli::format_bytes(columnwise), cli::format_bytes(high),
      cli::format_bytes(cache_bytes), cli::format_bytes(s.total_peak),
      cli::format_bytes(s.peak_of(MemTag::kSaved)),
      cli::format_bytes(s.peak_of(MemTag::kOptimizer)));
}

// A fresh run would replace config.json and metrics.jsonl at once and the checkpoint later: a
// directory that holds a run is refused unless the user says which of the two they want.
void refuse_existing_run(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string found;
  for (const std::string_view name :
       {std::string_view("config.json"), std::string_view("metrics.jsonl"), cli::kCheckpointFile}) {
    std::error_code ec;
    if (fs::exists(fs::path(dir) / name, ec))
      found += (found.empty() ? "" : ", ") + std::string(name);
  }
  OCTET_CHECK(found.empty(), "the run directory ", dir, " holds a run (", found,
              "): --resume continues it, --overwrite starts over and replaces it, or choose "
              "another --out");
}

// "1,2,3": token ids, each an integer in [0, 2^31).
std::vector<int32_t> parse_token_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string piece = text.substr(begin, end - begin);
    int32_t id = 0;
    const auto [stop, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), id);
    OCTET_CHECK(ec == std::errc() && stop == piece.data() + piece.size() && id >= 0,
                "--prompt-ids: \"", piece,
                "\" is not a token id (expected integers >= 0 "
                "separated by commas, such as 1,2,3)");
    ids.push_back(id);
    begin = end + 1;
  }
  return ids;
}

// The run config of `octet train --init SOURCE`: the model.* keys of its weights (all but
// fp8_primary_weights, which the run chooses), under the config file and --set. A model key the
// file or --set gives must agree with the weights.
config::RunConfig init_config(const std::string& file, const std::vector<std::string>& sets,
                              const config::ModelConfig& model, const std::string& source) {
  config::RunConfig with_model;
  with_model.model = model;
  nlohmann::ordered_json want = config::to_json(with_model)["model"];
  want.erase("fp8_primary_weights");
  const auto check = [&](const std::string& key, const nlohmann::ordered_json& value,
                         const std::string& from) {
    OCTET_CHECK(!want.contains(key) || want[key] == value, "config key \"model.", key, "\" is ",
                value.dump(), " (", from, "), but the --init weights of ", source, " have model.",
                key, "=", want[key].dump());
  };
  if (!file.empty()) {
    const auto json = nlohmann::ordered_json::parse(read_file_text(file, "config file"), nullptr,
                                                    /*allow_exceptions=*/false,
                                                    /*ignore_comments=*/true);
    if (json.is_object() && json.contains("model") && json["model"].is_object()) {
      for (const auto& [key, value] : json["model"].items()) check(key, value, "from " + file);
    }
  }
  std::vector<std::string> overrides = {"model=" + want.dump()};
  overrides.insert(overrides.end(), sets.begin(), sets.end());
  const config::RunConfig c = config::load_config(file, overrides);
  const nlohmann::ordered_json resolved = config::to_json(c);
  for (const auto& [key, value] : resolved["model"].items()) check(key, value, "from --set");
  return c;
}

// Forgets the weights of --init however the run ends.
struct InitWeightsScope {
  explicit InitWeightsScope(NamedTensors values) { cli::set_init_weights(std::move(values)); }
  ~InitWeightsScope() { cli::set_init_weights({}); }
  InitWeightsScope(const InitWeightsScope&) = delete;
  InitWeightsScope& operator=(const InitWeightsScope&) = delete;
};

}  // namespace

// ---- commands ----

int run_train(const Args& args, std::ostream& out) {
  const Parsed p = parse(args, "train",
                         {{"--config", Takes::kValue},
                          {"--set", Takes::kValue},
                          {"--out", Takes::kValue},
                          {"--init", Takes::kValue},
                          {"--resume", Takes::kFlag},
                          {"--overwrite", Takes::kFlag},
                          {"--quiet", Takes::kFlag}});
  if (printed_help(p, "train", out)) return 0;
  no_positional(p, "train");
  const std::vector<std::string> sets = p.values("--set");
  const cli::Resume resume = p.has("--resume") ? cli::Resume::kYes : cli::Resume::kNo;
  const std::optional<std::string> init = p.value("--init");
  OCTET_CHECK(!init || resume == cli::Resume::kNo,
              "octet train: --init starts a new run from weights and --resume continues one: "
              "give one of them");
  cli::InitWeights weights;
  config::RunConfig c;
  if (resume == cli::Resume::kYes && !p.has("--config")) {
    // Resuming without a config file continues the run as it was configured (plus --set).
    // Only to find the run directory: the full config is validated once it is assembled.
    config::RunConfig probe;
    for (const std::string& s : sets) config::apply_override(probe, s);
    const std::string dir = p.value("--out").value_or(probe.output.dir);
    const std::string path = (std::filesystem::path(dir) / cli::kCheckpointFile).string();
    OCTET_CHECK(std::filesystem::exists(path), "--resume: no checkpoint at ", path);
    c = cli::read_checkpoint(path).state.config;
    for (const std::string& s : sets) config::apply_override(c, s);
    c.output.dir = dir;
  } else if (init) {
    OCTET_CHECK(!init->empty(), "--init: expected a Hugging Face folder or a checkpoint");
    weights = cli::read_init_weights(*init);
    c = init_config(p.value("--config").value_or(""), sets, weights.model, *init);
    if (p.has("--out")) c.output.dir = *p.value("--out");
  } else {
    c = config::load_config(p.value("--config").value_or(""), sets);
    if (p.has("--out")) c.output.dir = *p.value("--out");
  }
  config::validate(c);
  OCTET_CHECK(!(resume == cli::Resume::kYes && p.has("--overwrite")),
              "octet train: --resume continues the run in ", c.output.dir,
              " and --overwrite replaces it: give one of them");
  if (resume == cli::Resume::kNo && !p.has("--overwrite")) refuse_existing_run(c.output.dir);
  // Under a launcher the output is mpirun's to forward (its ranks see a pseudo-terminal even
  // when mpirun's own output is a file): plain lines.
  const bool terminal = ::isatty(STDOUT_FILENO) != 0 && launch_info().size == 1;
  const cli::ProgressStyle style = p.has("--quiet") ? cli::ProgressStyle::kQuiet
                                   : terminal       ? cli::ProgressStyle::kLive
                                                    : cli::ProgressStyle::kLines;
  const InitWeightsScope init_scope(std::move(weights.values));
  if (init && style != cli::ProgressStyle::kQuiet && launch_info().rank == 0) {
    out << "starting from the weights of " << *init << '\n';
  }
  cli::train(c, resume, out, style);
  return 0;
}

int run_eval(const Args& args, std::ostream& out) {
  const Parsed p = parse(args, "eval",
                         {{"--checkpoint", Takes::kValue},
                          {"--data", Takes::kValue},
                          {"--set", Takes::kValue},
                          {"--examples", Takes::kValue},
                          {"--json", Takes::kFlag}});
  if (printed_help(p, "eval", out)) return 0;
  no_positional(p, "eval");
  const std::string path = required(p, "--checkpoint", "eval");
  std::vector<std::string> sets = p.values("--set");
  if (auto n = p.value("--examples")) {
    sets.push_back("training.eval_examples=" + std::to_string(parse_int(*n, "--examples", 1)));
  }
  autograd::InferenceModeGuard inference;
  LoadedModel m = load_model(path, sets, p.value("--data"));
  const modules::FP8HighPrecisionForward high_precision(
      cli::forward_in_high_precision(m.config, m.step));
  const cli::EvalResult r = cli::evaluate(*m.model, *m.dataset, m.config);
  if (p.has("--json")) {
    const nlohmann::ordered_json j = {{"checkpoint", path},     {"step", m.step},
                                      {"metric", r.name()},     {"value", r.value},
                                      {"examples", r.examples}, {"data", m.dataset->describe()}};
    out << j.dump() << '\n';
  } else {
    out << fmt::format("{} on {} held-out {} of {} (checkpoint {}, step {})\n", r.text(),
                       r.examples, r.metric == data::Metric::kExactMatch ? "examples" : "tokens",
                       m.dataset->describe(), path, m.step);
    for (const std::string& mistake : r.mistakes) out << "  e.g. " << mistake << '\n';
  }
  return 0;
}

// Generated ids as text; an id the tokenizer cannot decode (a model's vocabulary padded past the
// tokenizer's) prints as U+FFFD instead of ending the output with an error.
std::string decode_generated(const LoadedModel& m, const std::vector<int32_t>& ids) {
  const auto decode = [&](const std::vector<int32_t>& part) {
    return m.tokenizer ? m.tokenizer->decode(part) : m.dataset->decode(part);
  };
  try {
    return decode(ids);
  } catch (const Error&) {
    std::string text;
    for (const int32_t id : ids) {
      try {
        text += decode({id});
      } catch (const Error&) {
        text += "\xEF\xBF\xBD";
      }
    }
    return text;
  }
}

// The prompt's token ids (--prompt-ids, or --prompt through the checkpoint's tokenizer or the
// task's alphabet), checked against the model's vocabulary and context.
std::vector<int32_t> prompt_tokens(const LoadedModel& m, const std::string& prompt, bool as_ids) {
  const std::vector<int32_t> ids = as_ids        ? parse_token_ids(prompt)
                                   : m.tokenizer ? m.tokenizer->encode(prompt)
                                                 : m.dataset->encode(prompt);
  const std::string_view option = as_ids ? "--prompt-ids" : "--prompt";
  OCTET_CHECK(!ids.empty(), option, ": \"", prompt, "\" encodes to no tokens");
  const modules::GPTConfig& g = m.model->config();
  for (const int32_t id : ids) {
    OCTET_CHECK(id < g.vocab_size, option, ": token id ", id,
                " is outside the model's vocabulary [0, ", g.vocab_size, ")");
  }
  OCTET_CHECK(static_cast<int64_t>(ids.size()) <= g.max_seq_len, option, ": the prompt is ",
              ids.size(), " tokens, longer than the model's context of ", g.max_seq_len,
              " tokens (model.seq_len)");
  return ids;
}

// The generated ids (1, N) up to the end-of-sequence id, which is not printed.
std::vector<int32_t> printed_tokens(const Tensor& tokens, std::optional<int32_t> eos) {
  const auto* t = tokens.data_as<int32_t>();
  std::vector<int32_t> ids(t, t + tokens.numel());
  if (eos) ids.erase(std::find(ids.begin(), ids.end(), *eos), ids.end());
  return ids;
}

// generate's sampling options: --top-k, --top-p, --eos-id (default: the tokenizer's end-of-text
// id; "none" for none), --no-cache (re-run the window for every token).
modules::GenerateOptions generate_options(const Parsed& p, int64_t new_tokens, double temperature,
                                          std::optional<int32_t> tokenizer_eos, int64_t vocab) {
  modules::GenerateOptions o;
  o.new_tokens = new_tokens;
  o.temperature = static_cast<float>(temperature);
  o.top_k = parse_int(p.value("--top-k").value_or("0"), "--top-k", 0);
  o.top_p = static_cast<float>(parse_double(p.value("--top-p").value_or("1"), "--top-p"));
  OCTET_CHECK(o.top_p > 0.f && o.top_p <= 1.f, "--top-p: expected a number in (0, 1], got ",
              o.top_p);
  const std::string eos = p.value("--eos-id").value_or("");
  if (eos == "none") {
    o.eos_id.reset();
  } else if (!eos.empty()) {
    o.eos_id = static_cast<int32_t>(parse_int(eos, "--eos-id", 0));
    OCTET_CHECK(*o.eos_id < vocab, "--eos-id: ", *o.eos_id,
                " is outside the model's vocabulary [0, ", vocab, ")");
  } else {
    o.eos_id = tokenizer_eos;
  }
  o.kv_cache = p.has("--no-cache") ? modules::KVCacheUse::kNo : modules::KVCacheUse::kYes;
  return o;
}

int run_generate(const Args& args, std::ostream& out, std::ostream& err) {
  const Parsed p = parse(args, "generate",
                         {{"--checkpoint", Takes::kValue},
                          {"--prompt", Takes::kValue},
                          {"--prompt-ids", Takes::kValue},
                          {"--set", Takes::kValue},
                          {"--max-new-tokens", Takes::kValue},
                          {"--temperature", Takes::kValue},
                          {"--top-k", Takes::kValue},
                          {"--top-p", Takes::kValue},
                          {"--eos-id", Takes::kValue},
                          {"--no-cache", Takes::kFlag},
                          {"--seed", Takes::kValue}});
  if (printed_help(p, "generate", out)) return 0;
  no_positional(p, "generate");
  const std::string path = required(p, "--checkpoint", "generate");
  const std::optional<std::string> prompt_ids = p.value("--prompt-ids");
  OCTET_CHECK(!(prompt_ids && p.has("--prompt")),
              "octet generate: give --prompt (text) or --prompt-ids (token ids), not both");
  const std::string prompt = prompt_ids ? *prompt_ids : required(p, "--prompt", "generate");
  const double temperature = parse_double(p.value("--temperature").value_or("0"), "--temperature");
  OCTET_CHECK(temperature >= 0, "--temperature: expected a number >= 0 (0: greedy), got ",
              temperature);
  const auto seed = static_cast<uint64_t>(parse_int(p.value("--seed").value_or("0"), "--seed", 0));
  reset_peak_memory();
  autograd::InferenceModeGuard inference;
  LoadedModel m = load_model(path, p.values("--set"), std::nullopt,
                             prompt_ids ? DataUse::kNone : DataUse::kText);
  const auto* task = dynamic_cast<const data::AlgorithmicTask*>(m.dataset.get());
  const int64_t new_tokens = p.has("--max-new-tokens")
                                 ? parse_int(*p.value("--max-new-tokens"), "--max-new-tokens", 1)
                                 : (task != nullptr ? task->answer_len() : 64);
  const std::vector<int32_t> ids = prompt_tokens(m, prompt, prompt_ids.has_value());
  const modules::GPTConfig& g = m.model->config();
  const Tensor prompts =
      Tensor::from_bytes(ids.data(), {1, static_cast<int64_t>(ids.size())}, DType::kI32);
  Generator gen(seed);
  const modules::GenerateOptions options = generate_options(
      p, new_tokens, temperature, m.tokenizer ? m.tokenizer->eos_id() : std::nullopt, g.vocab_size);
  const modules::FP8HighPrecisionForward high_precision(
      cli::forward_in_high_precision(m.config, m.step));
  const modules::Generation result =
      train::generate(*m.model, cli::run_recipe(m.config), prompts, options, &gen);
  const std::vector<int32_t> generated = printed_tokens(result.tokens, options.eos_id);
  if (prompt_ids) {
    out << fmt::format("{}\n", fmt::join(generated, ","));
  } else {
    const std::string text = decode_generated(m, generated);
    out << prompt << text << '\n';
  }
  // stdout is only the text, so it can be piped; the memory summary is for the person.
  err << memory_line(*m.model, result.cache_bytes) << '\n';
  return 0;
}

int run_tokenize(const Args& args, std::ostream& out) {
  namespace fs = std::filesystem;
  const Parsed p =
      parse(args, "tokenize", {{"--tokenizer", Takes::kValue}, {"--out", Takes::kValue}});
  if (printed_help(p, "tokenize", out)) return 0;
  const std::string tokenizer_path = required(p, "--tokenizer", "tokenize");
  const std::string path = required(p, "--out", "tokenize");
  OCTET_CHECK(!p.positional.empty(),
              "octet tokenize: expected one or more text files (see octet tokenize --help)");
  std::error_code ec;
  OCTET_CHECK(!fs::is_directory(path, ec), "--out ", path,
              " is a directory: expected the shard file to write");
  const fs::path folder = fs::path(path).parent_path();
  OCTET_CHECK(folder.empty() || fs::is_directory(folder, ec), "--out ", path, ": the folder ",
              folder.string(), " does not exist");
  for (const std::string& file : p.positional) {
    OCTET_CHECK(!fs::equivalent(file, path, ec), "--out ", path, " is the text file ", file,
                ": choose another --out");
  }
  const data::Tokenizer tokenizer = data::Tokenizer::load(tokenizer_path);
  data::check_stream_vocab(tokenizer, "an llm.c token shard");
  // As llm.c's preprocessing does it: every document starts with the end-of-text token, so the
  // model sees where one ends and the next begins.
  const std::optional<int32_t> eos = tokenizer.eos_id();
  std::vector<uint16_t> tokens;
  int64_t bytes = 0;
  for (const std::string& file : p.positional) {
    const std::string text = read_file_text(file, "text file");
    const int64_t bad = first_invalid_utf8(text);
    OCTET_CHECK(bad < 0, "text file ", file, " is not valid UTF-8 (byte ", bad, ")");
    if (eos) tokens.push_back(static_cast<uint16_t>(*eos));
    for (const int32_t id : tokenizer.encode(text)) tokens.push_back(static_cast<uint16_t>(id));
    bytes += static_cast<int64_t>(text.size());
  }
  OCTET_CHECK(!tokens.empty(),
              "octet tokenize: the text files hold no text, so there is no token to write");
  // A temporary file renamed into place: a failed run leaves no shard, and no half of one.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    data::write_token_shard(tmp, tokens);
    fs::rename(tmp, path);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  const size_t files = p.positional.size();
  out << fmt::format(
      "wrote {}: {} tokens of {} from {} text file{} ({} bytes, {:.2f} bytes per token){}\n", path,
      tokens.size(), tokenizer.describe(), files, files == 1 ? "" : "s", bytes,
      static_cast<double>(bytes) / static_cast<double>(tokens.size()),
      eos ? fmt::format("; each file starts with the end-of-text token {}", *eos) : "");
  return 0;
}

int run_inspect(const Args& args, std::ostream& out) {
  const Parsed p = parse(args, "inspect", {{"--json", Takes::kFlag}});
  if (printed_help(p, "inspect", out)) return 0;
  OCTET_CHECK(p.positional.size() == 1, "octet inspect: expected one checkpoint path, got ",
              p.positional.size(), " (see octet inspect --help)");
  const cli::Checkpoint ckpt = cli::read_checkpoint(p.positional.front());
  if (p.has("--json")) {
    out << cli::inspect_json(ckpt).dump(2) << '\n';
  } else {
    out << cli::inspect_text(ckpt);
  }
  return 0;
}

int run_import(const Args& args, std::ostream& out) {
  const Parsed p = parse(args, "import", {{"--out", Takes::kValue}});
  if (printed_help(p, "import", out)) return 0;
  OCTET_CHECK(p.positional.size() == 1, "octet import: expected one Hugging Face folder, got ",
              p.positional.size(), " (see octet import --help)");
  const std::string& folder = p.positional.front();
  const std::string path = required(p, "--out", "import");
  std::error_code ec;
  OCTET_CHECK(!std::filesystem::exists(path, ec), "--out ", path,
              " exists: choose another path or remove it");
  const train::HfModel hf = train::import_hf(folder);
  cli::write_imported_checkpoint(hf, folder, path);
  const modules::GPTConfig& g = hf.config;
  const std::string kv_heads =
      g.n_kv_head == 0 ? std::string() : fmt::format(" ({} key/value)", g.n_kv_head);
  out << fmt::format(
      "imported {} from {} into {}: {} layers, d_model {}, {} heads{}, vocab {}, context {}; f32 "
      "weights (fp8.enabled=false until a recipe is chosen)\n",
      hf.architecture, folder, path, g.n_layer, g.d_model, g.n_head, kv_heads, g.vocab_size,
      g.max_seq_len);
  return 0;
}

int run_export(const Args& args, std::ostream& out) {
  const Parsed p = parse(args, "export", {{"--to", Takes::kValue}});
  if (printed_help(p, "export", out)) return 0;
  OCTET_CHECK(p.positional.size() == 1, "octet export: expected one checkpoint path, got ",
              p.positional.size(), " (see octet export --help)");
  const std::string& path = p.positional.front();
  const std::string folder = required(p, "--to", "export");
  autograd::InferenceModeGuard inference;
  LoadedModel m = load_model(path, {}, std::nullopt, DataUse::kNone);
  const std::string architecture = train::export_hf(*m.model, folder, m.hf_tokens);
  out << fmt::format("exported {} (step {}) to {} as {}: config.json, model.safetensors (f32)\n",
                     path, m.step, folder, architecture);
  return 0;
}

std::string user_message(std::string_view what) {
  static const std::regex location(R"([A-Za-z0-9_]+\.(cpp|cu|cc|h):[0-9]+: )");
  std::string text = std::regex_replace(std::string(what), location, "");
  for (char& ch : text) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  return text;
}

// The options every command takes, applied and removed from `args`: --log-level LEVEL, and
// --threads N (train records it as training.threads; bench reads its own).
Args apply_global_options(const std::string& command, const Args& args) {
  Args rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    const size_t eq = word.find('=');
    const std::string name = word.substr(0, eq);
    if (name != "--threads" && name != "--log-level") {
      rest.push_back(word);
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = word.substr(eq + 1);
    } else {
      OCTET_CHECK(i + 1 < args.size(), "octet ", command, ": ", name, " needs a value");
      value = args[++i];
    }
    if (name == "--log-level") {
      set_log_level(value);
    } else if (command == "bench") {
      rest.insert(rest.end(), {name, value});
    } else {
      const int64_t n = parse_int(value, "--threads", 1);
      OCTET_CHECK(n <= 1024, "--threads: expected an integer in [1, 1024], got ", n);
      if (command == "train") {
        rest.insert(rest.end(), {"--set", "training.threads=" + std::to_string(n)});
      } else {
        set_num_threads(static_cast<int>(n));
      }
    }
  }
  return rest;
}

// The one line an error gets on stderr. Under a launcher of several processes it names the rank
// and ends every rank (MPI_Abort), so that none waits forever in a collective for this one.
int report_error(const std::string& command, const std::string& message, std::ostream& err,
                 bool every_rank = false) {
  LaunchInfo launch;
  try {
    launch = launch_info();
  } catch (const std::exception&) {
    // A malformed launcher environment: report as one process.
  }
  // Each line goes out in one write: stderr is unbuffered, and under mpirun another process's
  // output (the launcher's abort notice) would otherwise land between the pieces of a line.
  const std::string line = "octet " + command + ": error: " + message + '\n';
  if (launch.size > 1 && every_rank) {
    // Every rank has this error: rank 0 reports it once and ends the run; the others wait for
    // that end rather than race it.
    if (launch.rank == 0) {
      err << line << std::flush;
      world_communicator()->abort(1);
    }
    world_communicator()->barrier();
  }
  if (launch.size > 1) {
    err << ("rank " + std::to_string(launch.rank) + ": error: octet " + command + ": " + message +
            '\n')
        << std::flush;
    world_communicator()->abort(1);
  }
  err << line;
  return 1;
}

int run_octet(const Args& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << help_text(args.size() > 1 && args[0] == "help" ? args[1] : "");
    return 0;
  }
  const std::string& command = args[0];
  try {
    const Args rest = apply_global_options(command, Args(args.begin() + 1, args.end()));
    if (command == "train") return run_train(rest, out);
    if (command == "eval") return run_eval(rest, out);
    if (command == "generate") return run_generate(rest, out, err);
    if (command == "inspect") return run_inspect(rest, out);
    if (command == "tokenize") return run_tokenize(rest, out);
    if (command == "import") return run_import(rest, out);
    if (command == "export") return run_export(rest, out);
    if (command == "bench") return bench::run_bench(rest, out);
    err << "octet: unknown command \"" << command
        << "\"; the commands are train, eval, generate, tokenize, bench, inspect, import and "
           "export (octet --help)\n";
    return 2;
  } catch (const CollectiveError& e) {
    return report_error(command, user_message(e.what()), err, /*every_rank=*/true);
  } catch (const Error& e) {
    OCTET_LOG_DEBUG("{}", e.what());  // with file:line, for whoever runs with debug logging
    return report_error(command, user_message(e.what()), err);
  } catch (const std::exception& e) {
    return report_error(command, user_message(e.what()), err);
  }
}

}  // namespace octet::cli
