// Command-line parsing and the train / eval / generate / inspect commands.
#include "tools/commands.h"

#include <fmt/format.h>
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
#include "runtime/comm.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/parallel.h"
#include "tools/bench.h"
#include "tools/checkpoint.h"
#include "tools/inspect.h"
#include "tools/metrics.h"
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

int64_t parse_int(const std::string& text, std::string_view option, int64_t min) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  OCTET_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= min, option,
              ": expected an integer >= ", min, ", got \"", text, "\"");
  return v;
}

double parse_double(const std::string& text, std::string_view option) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  OCTET_CHECK(used == text.size() && used > 0 && std::isfinite(v), option,
              ": expected a number, got \"", text, "\"");
  return v;
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

// The config a checkpoint was trained with, with `sets` applied; model.* and fp8.* must stay.
config::RunConfig checkpoint_config(const cli::Checkpoint& ckpt,
                                    const std::vector<std::string>& sets) {
  config::RunConfig c = ckpt.state.config;
  for (const std::string& s : sets) config::apply_override(c, s);
  OCTET_CHECK(c.model == ckpt.state.config.model && c.fp8 == ckpt.state.config.fp8,
              "--set cannot change model.* or fp8.* of a trained checkpoint (", ckpt.path, ")");
  // The vocabulary the weights were trained with, whatever data is given now.
  for (const auto& [name, t] : ckpt.model) {
    if (name == "wte.weight" && t.dim() == 2 && c.model.vocab == 0) c.model.vocab = t.size(0);
  }
  config::validate(c);
  return c;
}

struct LoadedModel {
  config::RunConfig config;
  std::unique_ptr<data::Dataset> dataset;
  std::unique_ptr<modules::GPT> model;
  int64_t step = 0;
};

// Builds and loads the model in inference mode (the caller holds the guard): FP8 primary weights
// are made row-wise only, and nothing records autograd state.
LoadedModel load_model(const std::string& path, const std::vector<std::string>& sets,
                       const std::optional<std::string>& data_path) {
  const cli::Checkpoint ckpt = cli::read_checkpoint(path);
  config::RunConfig c = checkpoint_config(ckpt, sets);
  if (data_path) {
    OCTET_CHECK(c.data.kind != "task", "--data: checkpoint ", path,
                " was trained on the built-in task (", c.data.task,
                "), which reads no file; --data is for text and shard checkpoints");
    c.data.path = *data_path;
    // A shard run with its own validation shards evaluates on them; --data replaces them, so
    // the file named is the file evaluated (all of it, as the run's val_path was).
    if (!c.data.val_path.empty()) c.data.val_path = *data_path;
  }
  LoadedModel m;
  m.dataset = data::open_dataset(config::data_options(c));
  m.model = std::make_unique<modules::GPT>(cli::gpt_config(c, *m.dataset));
  cli::load_model_state(*m.model, ckpt);
  m.model->eval();
  m.config = std::move(c);
  m.step = ckpt.state.step;
  return m;
}

std::string memory_line(modules::GPT& model) {
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
      "peak {} in all, {} saved for backward, {} optimizer state",
      cli::format_bytes(rowwise), cli::format_bytes(columnwise), cli::format_bytes(high),
      cli::format_bytes(s.total_peak), cli::format_bytes(s.peak_of(MemTag::kSaved)),
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

}  // namespace

// ---- commands ----

int run_train(const Args& args, std::ostream& out) {
  const Parsed p = parse(args, "train",
                         {{"--config", Takes::kValue},
                          {"--set", Takes::kValue},
                          {"--out", Takes::kValue},
                          {"--resume", Takes::kFlag},
                          {"--overwrite", Takes::kFlag},
                          {"--quiet", Takes::kFlag}});
  if (p.has("--help")) {
    out << help_text("train");
    return 0;
  }
  no_positional(p, "train");
  const std::vector<std::string> sets = p.values("--set");
  const cli::Resume resume = p.has("--resume") ? cli::Resume::kYes : cli::Resume::kNo;
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
  if (p.has("--help")) {
    out << help_text("eval");
    return 0;
  }
  no_positional(p, "eval");
  const std::string path = required(p, "--checkpoint", "eval");
  std::vector<std::string> sets = p.values("--set");
  if (auto n = p.value("--examples")) {
    sets.push_back("training.eval_examples=" + std::to_string(parse_int(*n, "--examples", 1)));
  }
  autograd::InferenceModeGuard inference;
  LoadedModel m = load_model(path, sets, p.value("--data"));
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

int run_generate(const Args& args, std::ostream& out, std::ostream& err) {
  const Parsed p = parse(args, "generate",
                         {{"--checkpoint", Takes::kValue},
                          {"--prompt", Takes::kValue},
                          {"--max-new-tokens", Takes::kValue},
                          {"--temperature", Takes::kValue},
                          {"--seed", Takes::kValue}});
  if (p.has("--help")) {
    out << help_text("generate");
    return 0;
  }
  no_positional(p, "generate");
  const std::string path = required(p, "--checkpoint", "generate");
  const std::string prompt = required(p, "--prompt", "generate");
  const double temperature = parse_double(p.value("--temperature").value_or("0"), "--temperature");
  OCTET_CHECK(temperature >= 0, "--temperature: expected a number >= 0 (0: greedy), got ",
              temperature);
  const auto seed = static_cast<uint64_t>(parse_int(p.value("--seed").value_or("0"), "--seed", 0));
  reset_peak_memory();
  autograd::InferenceModeGuard inference;
  LoadedModel m = load_model(path, {}, std::nullopt);
  const auto* task = dynamic_cast<const data::AlgorithmicTask*>(m.dataset.get());
  const int64_t new_tokens = p.has("--max-new-tokens")
                                 ? parse_int(*p.value("--max-new-tokens"), "--max-new-tokens", 1)
                                 : (task != nullptr ? task->answer_len() : 64);
  const std::vector<int32_t> ids = m.dataset->encode(prompt);
  OCTET_CHECK(!ids.empty(), "--prompt: \"", prompt, "\" encodes to no tokens");
  const Tensor prompts =
      Tensor::from_bytes(ids.data(), {1, static_cast<int64_t>(ids.size())}, DType::kI32);
  Generator gen(seed);
  const Tensor tokens = train::generate_tokens(*m.model, cli::run_recipe(m.config), prompts,
                                               new_tokens, static_cast<float>(temperature), &gen);
  const auto* t = tokens.data_as<int32_t>();
  out << prompt << m.dataset->decode(std::vector<int32_t>(t, t + tokens.numel())) << '\n';
  // stdout is only the text, so it can be piped; the memory summary is for the person.
  err << memory_line(*m.model) << '\n';
  return 0;
}

int run_inspect(const Args& args, std::ostream& out) {
  const Parsed p = parse(args, "inspect", {{"--json", Takes::kFlag}});
  if (p.has("--help")) {
    out << help_text("inspect");
    return 0;
  }
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
    if (command == "bench") return bench::run_bench(rest, out);
    err << "octet: unknown command \"" << command
        << "\"; the commands are train, eval, generate, bench and inspect (octet --help)\n";
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
