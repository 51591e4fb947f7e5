// The config schema (one table binding each dotted key to its field), type and range checks with
// messages that name the key, layered loading, JSON round trip and the generated key reference.
#include "tools/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <variant>

#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/recipe.h"
#include "runtime/text_file.h"

namespace octet::config {
namespace {

// Ordered, so a recipe object keeps the key order it was written in.
using Json = nlohmann::ordered_json;
using FieldRef = std::variant<int64_t*, double*, bool*, std::string*, std::array<double, 2>*, Json*,
                              std::vector<std::string>*>;
using Accessor = FieldRef (*)(RunConfig&);

struct Entry {
  KeySpec spec;
  Accessor field;
};

// The key's dotted path is the member's own spelling, so the two cannot drift apart.
#define OCTET_KEY(member) #member, [](RunConfig & c) -> FieldRef { return &c.member; }

constexpr double kMaxCount = 1e9;
constexpr double kMaxSeed = 9007199254740992.0;  // 2^53: exact in every JSON reader

Entry int_key(const char* path, Accessor f, double lo, double hi, std::string doc) {
  return {{path, KeyType::kInt, {lo, hi}, {}, std::move(doc)}, f};
}
Entry float_key(const char* path, Accessor f, Range range, std::string doc) {
  return {{path, KeyType::kFloat, range, {}, std::move(doc)}, f};
}
Entry bool_key(const char* path, Accessor f, std::string doc) {
  return {{path, KeyType::kBool, {}, {}, std::move(doc)}, f};
}
Entry string_key(const char* path, Accessor f, std::string doc) {
  return {{path, KeyType::kString, {}, {}, std::move(doc)}, f};
}
Entry choice_key(const char* path, Accessor f, std::vector<std::string> choices, std::string doc) {
  return {{path, KeyType::kChoice, {}, std::move(choices), std::move(doc)}, f};
}

std::vector<Entry> model_keys() {
  return {
      choice_key(OCTET_KEY(model.arch), {"gpt2", "llama"},
                 "gpt2: learned position embeddings; llama: rotary positions on queries and keys"),
      int_key(OCTET_KEY(model.n_layer), 1, 128, "transformer layers"),
      int_key(OCTET_KEY(model.d_model), 8, 16384, "model width (a multiple of 16 for FP8 GEMMs)"),
      int_key(OCTET_KEY(model.n_head), 1, 256, "attention heads; must divide model.d_model"),
      int_key(OCTET_KEY(model.n_kv_head), 0, 256,
              "key/value heads (grouped-query attention); must divide model.n_head; 0: n_head"),
      float_key(OCTET_KEY(model.rope_theta), {1, 1e9, Bound::kOpen, Bound::kClosed},
                "rotary base (model.arch llama)"),
      int_key(OCTET_KEY(model.ffn_hidden), 0, 1 << 18,
              "MLP hidden width (per half for gated activations); 0: 4 * model.d_model"),
      int_key(OCTET_KEY(model.vocab), 0, 1 << 20, "vocabulary size; 0: the data's"),
      int_key(OCTET_KEY(model.seq_len), 0, 65536,
              "context length; 0: the task's example length (tasks only)"),
      choice_key(OCTET_KEY(model.activation),
                 {"gelu", "relu", "srelu", "silu", "swiglu", "geglu", "reglu"},
                 "MLP activation (gelu is the tanh form; swiglu/geglu/reglu are gated)"),
      choice_key(OCTET_KEY(model.norm), {"layernorm", "rmsnorm"}, "normalisation layers"),
      float_key(OCTET_KEY(model.norm_eps), {0, 1, Bound::kOpen, Bound::kClosed},
                "epsilon of the normalisation layers (1e-05 in GPT-2, 1e-05 or 1e-06 in Llama "
                "models)"),
      bool_key(OCTET_KEY(model.zero_centered_gamma), "norm weights stored as gamma - 1"),
      bool_key(OCTET_KEY(model.bias), "biases in linear layers"),
      bool_key(OCTET_KEY(model.tie_embeddings), "LM head shares the token embedding"),
      bool_key(OCTET_KEY(model.fp8_primary_weights),
               "weights stored in FP8 with f32 master copies in the optimizer"),
      choice_key(OCTET_KEY(model.dtype), {"auto", "f32", "bf16"},
                 "parameters and activations (f32 master weights and moments in the optimizer, "
                 "f32 loss); auto: bf16 on CUDA, f32 on the CPU"),
  };
}

std::vector<Entry> fp8_keys() {
  return {
      bool_key(OCTET_KEY(fp8.enabled), "run the GEMMs in FP8 (false: f32 throughout)"),
      {{"fp8.recipe",
        KeyType::kRecipe,
        {},
        {},
        "scaling recipe: a recipe JSON file or an inline "
        "recipe object (see Recipes)"},
       [](RunConfig& c) -> FieldRef { return &c.fp8.recipe; }},
      {{"fp8.high_precision_modules",
        KeyType::kStringList,
        {},
        {},
        "FP8 modules kept in high precision: patterns (`*`, `?`) over names like "
        "`layers.0.mlp` or `layers.*.attn.proj`; `layers.0` is all of layer 0"},
       [](RunConfig& c) -> FieldRef { return &c.fp8.high_precision_modules; }},
      int_key(OCTET_KEY(fp8.high_precision_first_layers), 0, 128,
              "the first N transformer layers kept out of FP8"),
      int_key(OCTET_KEY(fp8.high_precision_last_layers), 0, 128,
              "the last N transformer layers kept out of FP8"),
      float_key(OCTET_KEY(fp8.high_precision_after), {0, 1, Bound::kClosed, Bound::kClosed},
                "the fraction of training.steps after which the forward GEMMs run in high "
                "precision, the backward still under the recipe (NVIDIA's switch for a run's "
                "last steps); 1: never"),
      bool_key(OCTET_KEY(fp8.lm_head),
               "the LM head's GEMM (tied or untied) under the recipe too, as the FP8 module "
               "lm_head_gemm; false: high precision"),
      bool_key(OCTET_KEY(fp8.high_precision_backward),
               "the backward GEMMs in high precision (dY, the input and the weight uncast), the "
               "forward GEMMs under the recipe: the forward-only ablation"),
  };
}

std::vector<Entry> data_keys() {
  return {
      choice_key(
          OCTET_KEY(data.kind), {"task", "text", "shards"},
          "built-in task, a UTF-8 text file (bytes, or the tokens of data.tokenizer), or llm.c "
          "token shards"),
      string_key(OCTET_KEY(data.path),
                 "text: the file; shards: a .bin file, a directory of them or a glob pattern"),
      string_key(OCTET_KEY(data.tokenizer),
                 "text and shards: a tokenizer.json, or a folder with tokenizer.json or "
                 "vocab.json + merges.txt (byte-level BPE; checkpoints carry it); empty: text "
                 "as bytes, shards without a tokenizer"),
      string_key(OCTET_KEY(data.val_path),
                 "shards: validation shards; empty: hold out the tail of data.path"),
      float_key(OCTET_KEY(data.val_fraction), {0, 0.5, Bound::kOpen, Bound::kClosed},
                "share of text (or of shards without data.val_path) held out for validation"),
      choice_key(OCTET_KEY(data.task), {"sort", "add"},
                 "sort digits ascending, or add two numbers (sum written least-significant first)"),
      int_key(OCTET_KEY(data.task_digits), 2, 16,
              "sort: digits per sequence (3-16); add: digits per operand (2-8)"),
      int_key(OCTET_KEY(data.seed), 0, kMaxSeed,
              "which task problems are drawn and which are held out"),
  };
}

std::vector<Entry> optimizer_keys() {
  return {
      choice_key(OCTET_KEY(optimizer.kind), {"sgd", "adamw"}, "optimizer"),
      float_key(OCTET_KEY(optimizer.lr), {0, 10, Bound::kOpen, Bound::kClosed},
                "peak learning rate"),
      {{"optimizer.betas",
        KeyType::kFloatPair,
        {0, 1, Bound::kClosed, Bound::kOpen},
        {},
        "AdamW moment decay rates [beta1, beta2]"},
       [](RunConfig& c) -> FieldRef { return &c.optimizer.betas; }},
      float_key(OCTET_KEY(optimizer.eps), {0, 1, Bound::kOpen, Bound::kClosed}, "AdamW epsilon"),
      float_key(OCTET_KEY(optimizer.weight_decay), {0, 10}, "decoupled weight decay"),
      float_key(OCTET_KEY(optimizer.momentum), {0, 1, Bound::kClosed, Bound::kOpen},
                "SGD momentum"),
      float_key(OCTET_KEY(optimizer.grad_clip), {0, 1e6},
                "clip the global gradient norm to this; 0: no clipping"),
  };
}

std::vector<Entry> schedule_keys() {
  return {
      int_key(OCTET_KEY(schedule.warmup_steps), 0, kMaxCount, "linear learning-rate warm-up"),
      int_key(OCTET_KEY(schedule.total_steps), 0, kMaxCount,
              "cosine decay length; 0: training.steps"),
      float_key(OCTET_KEY(schedule.min_lr_ratio), {0, 1},
                "learning rate at the end of the decay, as a share of optimizer.lr"),
  };
}

std::vector<Entry> training_keys() {
  return {
      int_key(OCTET_KEY(training.steps), 1, kMaxCount, "optimizer steps"),
      int_key(OCTET_KEY(training.batch_size), 1, 65536, "sequences per micro-batch"),
      int_key(OCTET_KEY(training.grad_accum), 1, 4096, "micro-batches per optimizer step"),
      int_key(OCTET_KEY(training.eval_interval), 0, kMaxCount,
              "steps between evaluations; 0: only at the end"),
      int_key(OCTET_KEY(training.eval_batches), 1, 1e6, "validation batches per evaluation"),
      int_key(OCTET_KEY(training.eval_examples), 1, 1e6,
              "held-out problems generated for exact-match accuracy (tasks)"),
      int_key(OCTET_KEY(training.checkpoint_interval), 0, kMaxCount,
              "steps between checkpoints; 0: only at the end"),
      int_key(OCTET_KEY(training.log_interval), 1, kMaxCount, "steps between metrics lines"),
      int_key(OCTET_KEY(training.seed), 0, kMaxSeed, "weight initialisation and dropout"),
      {{"training.device", KeyType::kDevice, {}, {}, "where to train: cpu, cuda or cuda:N"},
       [](RunConfig& c) -> FieldRef { return &c.training.device; }},
      int_key(OCTET_KEY(training.max_nonfinite_steps), 1, 1e6,
              "steps in a row with a NaN/inf loss (each skipped) before the run stops"),
      int_key(OCTET_KEY(training.threads), 0, 1024,
              "CPU threads (--threads on the command line); 0: the machine's cores"),
      bool_key(OCTET_KEY(training.log_fp8_slots),
               "metrics.jsonl lists every FP8 slot and weight by name; false: one FP8 summary per "
               "line"),
      int_key(OCTET_KEY(training.zero_stage), 0, 1,
              "data parallel (mpirun -np N): 1 shards the optimizer state across the ranks "
              "(ZeRO-1); 0: every rank holds all of it"),
      int_key(OCTET_KEY(training.grad_bucket_kb), 1, 1 << 20,
              "data parallel: KiB of f32 gradients per bucket, each reduced across the ranks as "
              "soon as the backward has produced it"),
      bool_key(OCTET_KEY(training.cuda_graphs),
               "on CUDA: capture the training step once as a CUDA graph and replay it (one launch "
               "a step, bit-identical results) where the run allows it: one process and a recipe "
               "without random streams (not NVFP4's stochastic rounding or quartet2); false: "
               "launch every kernel of every step"),
  };
}

std::vector<Entry> output_keys() {
  return {
      string_key(OCTET_KEY(output.dir), "run directory: config, metrics, checkpoints, plots"),
  };
}

// Every key, section by section, in the order the resolved JSON lists them.
const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = [] {
    std::vector<Entry> all;
    for (auto section : {model_keys, fp8_keys, data_keys, optimizer_keys, schedule_keys,
                         training_keys, output_keys}) {
      std::vector<Entry> keys = section();
      all.insert(all.end(), std::make_move_iterator(keys.begin()),
                 std::make_move_iterator(keys.end()));
    }
    return all;
  }();
  return table;
}

#undef OCTET_KEY

const Entry* find_entry(std::string_view path) {
  for (const Entry& e : entries()) {
    if (e.spec.path == path) return &e;
  }
  return nullptr;
}

std::string section_of(const std::string& path) { return path.substr(0, path.find('.')); }

bool is_section(std::string_view name) {
  return std::any_of(entries().begin(), entries().end(),
                     [&](const Entry& e) { return section_of(e.spec.path) == name; });
}

std::string number_text(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e16) return fmt::format("{}", static_cast<int64_t>(x));
  return fmt::format("{}", x);
}

std::string range_text(const Range& r) {
  return (r.min_bound == Bound::kOpen ? "(" : "[") + number_text(r.min) + ", " +
         number_text(r.max) + (r.max_bound == Bound::kOpen ? ")" : "]");
}

bool in_range(double x, const Range& r) {
  const bool above = r.min_bound == Bound::kOpen ? x > r.min : x >= r.min;
  const bool below = r.max_bound == Bound::kOpen ? x < r.max : x <= r.max;
  return std::isfinite(x) && above && below;
}

std::string choices_text(const std::vector<std::string>& choices, const char* quote) {
  std::string text;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) text += i + 1 == choices.size() ? " or " : ", ";
    text += quote + choices[i] + quote;
  }
  return text;
}

std::string expectation(const KeySpec& s) {
  switch (s.type) {
    case KeyType::kInt:
      return "an integer in " + range_text(s.range);
    case KeyType::kFloat:
      return "a number in " + range_text(s.range);
    case KeyType::kBool:
      return "true or false";
    case KeyType::kString:
      return "a string";
    case KeyType::kChoice:
      return "one of " + choices_text(s.choices, "\"");
    case KeyType::kFloatPair:
      return "[a, b] with each number in " + range_text(s.range);
    case KeyType::kDevice:
      return "a device: \"cpu\", \"cuda\" or \"cuda:N\"";
    case KeyType::kRecipe:
      return "a recipe file path (a string) or an inline recipe object";
    case KeyType::kStringList:
      return "an array of strings";
  }
  OCTET_FAIL("unknown key type ", static_cast<int>(s.type));
}

// An integer value, also accepted when written as an integral float (2e3).
std::optional<int64_t> as_integer(const Json& v) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return {};
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
      return static_cast<int64_t>(d);
    }
  }
  return {};
}

// A value as JSON text for messages; bytes that are not UTF-8 show as U+FFFD instead of
// making the message itself fail.
std::string shown(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Strings of a config end up in config.json and checkpoints, which are JSON: UTF-8 only.
void check_utf8(const std::string& text, const std::string& path, std::string_view source) {
  const int64_t bad = first_invalid_utf8(text);
  OCTET_CHECK(bad < 0, "config key \"", path, "\" (from ", printable(source),
              "): expected UTF-8 text, got \"", printable(text), "\" (byte ", bad < 0 ? 0 : bad,
              " is not UTF-8)");
}

// An integer key's range, compared exactly (a double would round 2^53 + 1 down into range).
bool int_in_range(int64_t i, const Range& r) {
  return i >= static_cast<int64_t>(r.min) && i <= static_cast<int64_t>(r.max);
}

// The type and range check of a key's value: the message says what was expected and what came.
void check_value(bool ok, const KeySpec& s, const Json& v, std::string_view source) {
  OCTET_CHECK(ok, "config key \"", s.path, "\" (from ", printable(source), "): expected ",
              expectation(s), ", got ", shown(v));
}

bool is_device_name(const Json& v) {
  if (!v.is_string()) return false;
  try {
    parse_device(v.get<std::string>());
  } catch (const Error&) {
    return false;
  }
  return true;
}

// The recipe a (type-checked) fp8.recipe value stands for: a file's recipe, or the inline object.
Json recipe_value(const KeySpec& s, const Json& v, std::string_view source) {
  if (v.is_string()) {
    // The run records the recipe itself, not the path: moving or editing the file later
    // changes nothing about the run (eval, resume).
    try {
      return Json(recipe_to_json(load_recipe(v.get<std::string>())));
    } catch (const Error& err) {
      OCTET_FAIL("config key \"", s.path, "\" (from ", printable(source), "): ", err.what());
    }
  }
  // Checked now, so that a bad recipe in a file or a checkpoint names where it came from.
  try {
    (void)recipe_from_json(nlohmann::json(v), s.path);
  } catch (const Error& err) {
    OCTET_FAIL("config key \"", s.path, "\" (from ", printable(source), "): ", err.what());
  }
  return v;
}

// A (type-checked) array of strings, each checked for UTF-8 as it is copied.
void assign_strings(std::vector<std::string>& list, const KeySpec& s, const Json& v,
                    std::string_view source) {
  list.clear();
  for (const Json& item : v) {
    check_utf8(item.get<std::string>(), s.path, source);
    list.push_back(item.get<std::string>());
  }
}

void set_value(RunConfig& config, const Entry& e, const Json& v, std::string_view source) {
  const KeySpec& s = e.spec;
  auto check = [&](bool ok) { check_value(ok, s, v, source); };
  if (v.is_string()) check_utf8(v.get<std::string>(), s.path, source);
  const FieldRef field = e.field(config);
  switch (s.type) {
    case KeyType::kInt: {
      const std::optional<int64_t> i = as_integer(v);
      check(i.has_value() && int_in_range(*i, s.range));
      *std::get<int64_t*>(field) = *i;
      return;
    }
    case KeyType::kFloat:
      check(v.is_number() && in_range(v.get<double>(), s.range));
      *std::get<double*>(field) = v.get<double>();
      return;
    case KeyType::kBool:
      check(v.is_boolean());
      *std::get<bool*>(field) = v.get<bool>();
      return;
    case KeyType::kString:
      check(v.is_string());
      *std::get<std::string*>(field) = v.get<std::string>();
      return;
    case KeyType::kChoice:
      check(v.is_string() &&
            std::find(s.choices.begin(), s.choices.end(), v.get<std::string>()) != s.choices.end());
      *std::get<std::string*>(field) = v.get<std::string>();
      return;
    case KeyType::kFloatPair:
      check(v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number() &&
            in_range(v[0].get<double>(), s.range) && in_range(v[1].get<double>(), s.range));
      *std::get<std::array<double, 2>*>(field) = {v[0].get<double>(), v[1].get<double>()};
      return;
    case KeyType::kDevice:
      check(is_device_name(v));
      *std::get<std::string*>(field) = v.get<std::string>();
      return;
    case KeyType::kRecipe:
      check(v.is_object() || (v.is_string() && !v.get<std::string>().empty()));
      *std::get<Json*>(field) = recipe_value(s, v, source);
      return;
    case KeyType::kStringList:
      check(v.is_array() &&
            std::all_of(v.begin(), v.end(), [](const Json& s) { return s.is_string(); }));
      assign_strings(*std::get<std::vector<std::string>*>(field), s, v, source);
      return;
  }
  OCTET_FAIL("unknown key type ", static_cast<int>(s.type));
}

Json get_value(const RunConfig& config, const Entry& e) {
  // The accessor takes a mutable config so one table serves reads and writes; this only reads.
  const FieldRef field = e.field(const_cast<RunConfig&>(config));
  return std::visit([](auto* p) { return Json(*p); }, field);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

[[noreturn]] void unknown_key(const std::string& path, std::string_view source) {
  std::vector<std::string> candidates;
  for (const Entry& e : entries()) {
    candidates.push_back(e.spec.path);
    if (std::find(candidates.begin(), candidates.end(), section_of(e.spec.path)) ==
        candidates.end()) {
      candidates.push_back(section_of(e.spec.path));
    }
  }
  std::string best;
  size_t best_distance = std::max<size_t>(2, path.size() / 4) + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(path, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  std::string hint;
  if (!best.empty()) {
    hint = "; did you mean \"" + best + "\"?";
  } else if (is_section(section_of(path))) {
    std::vector<std::string> keys;
    for (const Entry& e : entries()) {
      if (section_of(e.spec.path) == section_of(path)) keys.push_back(e.spec.path);
    }
    hint = "; the keys of " + section_of(path) + " are " + choices_text(keys, "");
  } else {
    std::vector<std::string> sections;
    for (const Entry& e : entries()) {
      const std::string s = section_of(e.spec.path);
      if (std::find(sections.begin(), sections.end(), s) == sections.end()) sections.push_back(s);
    }
    hint = "; the sections are " + choices_text(sections, "");
  }
  OCTET_FAIL("unknown config key \"", printable(path), "\" (from ", printable(source), ")", hint);
}

void apply_object(RunConfig& config, const std::string& prefix, const Json& object,
                  std::string_view source) {
  for (const auto& [key, value] : object.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (const Entry* e = find_entry(path)) {
      set_value(config, *e, value, source);
    } else if (prefix.empty() && is_section(path)) {
      OCTET_CHECK(value.is_object(), "config key \"", path, "\" (from ", printable(source),
                  ") is a section: expected an object of its keys, got ", shown(value));
      apply_object(config, path, value, source);
    } else {
      unknown_key(path, source);
    }
  }
}

// The JSON an override's text stands for: JSON when it parses as a value of the key's type,
// otherwise the bare text as a string (so data.path=123 is the path "123").
Json override_value(KeyType type, const std::string& text) {
  const Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const bool ok = !parsed.is_discarded();
  switch (type) {
    case KeyType::kString:
    case KeyType::kChoice:
    case KeyType::kDevice:
      return ok && parsed.is_string() ? parsed : Json(text);
    case KeyType::kRecipe: {
      if (ok && (parsed.is_string() || parsed.is_object())) return parsed;
      // Text that starts like an object is a broken inline recipe, not a file name.
      const size_t start = text.find_first_not_of(" \t\r\n");
      if (start != std::string::npos && text[start] == '{') {
        try {
          return Json::parse(text);  // throws: it did not parse above, and says why now
        } catch (const Json::exception& e) {
          OCTET_FAIL("config key \"fp8.recipe\" (from --set fp8.recipe=", printable(text),
                     "): not a valid inline recipe object: ", json_error_text(e.what()));
        }
      }
      return Json(text);
    }
    default:
      return ok ? parsed : Json(text);
  }
}

}  // namespace

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> specs = [] {
    std::vector<KeySpec> out;
    for (const Entry& e : entries()) out.push_back(e.spec);
    return out;
  }();
  return specs;
}

const KeySpec* find_key(std::string_view path) {
  for (const KeySpec& s : schema()) {
    if (s.path == path) return &s;
  }
  return nullptr;
}

void apply_json(RunConfig& config, const nlohmann::ordered_json& json, std::string_view source) {
  OCTET_CHECK(json.is_object(), "config (from ", printable(source),
              ") must be a JSON object of sections such as {\"model\": {...}}, got ",
              json.type_name());
  apply_object(config, "", json, source);
}

void apply_override(RunConfig& config, std::string_view assignment) {
  return with_error_context("--set " + printable(assignment), [&] {
    const size_t eq = assignment.find('=');
    OCTET_CHECK(eq != std::string_view::npos && eq > 0, "--set \"", printable(assignment),
                "\": expected key=value with a dotted key, such as model.n_layer=4");
    const std::string key(assignment.substr(0, eq));
    const std::string text(assignment.substr(eq + 1));
    const std::string source = "--set " + std::string(assignment);
    if (const Entry* e = find_entry(key)) {
      set_value(config, *e, override_value(e->spec.type, text), source);
    } else if (is_section(key)) {
      const Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      OCTET_CHECK(!value.is_discarded() && value.is_object(), "config key \"", key, "\" (from ",
                  printable(source), ") is a section: expected a JSON object of its keys, got ",
                  printable(text));
      apply_object(config, key, value, source);
    } else {
      unknown_key(key, source);
    }
  });
}

int64_t total_schedule_steps(const RunConfig& c) {
  return c.schedule.total_steps > 0 ? c.schedule.total_steps : c.training.steps;
}

void validate(const RunConfig& c) {
  OCTET_CHECK(c.model.d_model % c.model.n_head == 0,
              "config key \"model.n_head\": ", c.model.n_head,
              " heads do not divide model.d_model ", c.model.d_model);
  OCTET_CHECK(c.model.n_kv_head == 0 || c.model.n_head % c.model.n_kv_head == 0,
              "config key \"model.n_kv_head\": ", c.model.n_kv_head,
              " key/value heads do not divide model.n_head ", c.model.n_head);
  OCTET_CHECK(c.model.arch != "llama" || (c.model.d_model / c.model.n_head) % 2 == 0,
              "config key \"model.arch\" is \"llama\": rotary positions need an even head "
              "dimension, but model.d_model / model.n_head is ",
              c.model.d_model / c.model.n_head);
  const bool file_data = c.data.kind != "task";
  OCTET_CHECK(!file_data || !c.data.path.empty(), "config key \"data.path\" is empty: data.kind \"",
              c.data.kind, "\" needs a file to read");
  OCTET_CHECK(!file_data || c.model.seq_len > 0,
              "config key \"model.seq_len\" is 0 (take it "
              "from the data), but only data.kind \"task\" has a natural length: set it for "
              "data.kind \"",
              c.data.kind, "\"");
  OCTET_CHECK(file_data || c.data.tokenizer.empty(), "config key \"data.tokenizer\" is \"",
              c.data.tokenizer,
              "\", but data.kind \"task\" has its own tokens: a tokenizer is for ",
              "data.kind \"text\" or \"shards\"");
  if (c.data.kind == "task") {
    const bool sort = c.data.task == "sort";
    const int64_t lo = sort ? 3 : 2, hi = sort ? 16 : 8;
    OCTET_CHECK(c.data.task_digits >= lo && c.data.task_digits <= hi,
                "config key \"data.task_digits\": ", c.data.task_digits,
                " does not suit data.task \"", c.data.task, "\": expected an integer in [", lo,
                ", ", hi, "]");
  }
  OCTET_CHECK(c.schedule.warmup_steps <= total_schedule_steps(c),
              "config key \"schedule.warmup_steps\": ", c.schedule.warmup_steps,
              " warm-up steps exceed the schedule's ", total_schedule_steps(c),
              " (schedule.total_steps, or training.steps when it is 0)");
  OCTET_CHECK(!c.output.dir.empty(), "config key \"output.dir\" is empty: expected a directory");
  // Values set around apply_json (--out) are checked here too: config.json must be writable.
  for (const Entry& e : entries()) {
    const FieldRef field = e.field(const_cast<RunConfig&>(c));
    if (auto* text = std::get_if<std::string*>(&field))
      check_utf8(**text, e.spec.path, "the resolved config");
  }
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return with_error_context(
      path.empty() ? std::string("config") : "config file " + printable(path), [&] {
        RunConfig config;
        if (!path.empty()) {
          const std::string text = read_file_text(path, "config file");
          Json json;
          try {
            json = Json::parse(text, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
          } catch (const Json::exception& e) {
            OCTET_FAIL("config file ", printable(path),
                       " is not valid JSON: ", json_error_text(e.what()));
          }
          apply_json(config, json, "file " + path);
        }
        for (const std::string& assignment : overrides) apply_override(config, assignment);
        try {
          validate(config);
        } catch (const Error& e) {
          // A check between keys names the keys; the file they came from is named here.
          if (path.empty()) throw;
          OCTET_FAIL("config file ", printable(path), overrides.empty() ? "" : " and --set", ": ",
                     e.what());
        }
        return config;
      });
}

nlohmann::ordered_json to_json(const RunConfig& config) {
  Json out = Json::object();
  for (const Entry& e : entries()) {
    const std::string& path = e.spec.path;
    const size_t dot = path.find('.');
    out[path.substr(0, dot)][path.substr(dot + 1)] = get_value(config, e);
  }
  return out;
}

RunConfig from_json(const nlohmann::ordered_json& json, std::string_view source) {
  return with_error_context(std::string(printable(source)), [&] {
    RunConfig config;
    apply_json(config, json, source);
    validate(config);
    return config;
  });
}

data::DataOptions data_options(const RunConfig& c) {
  data::DataOptions options;
  options.kind = data::parse_data_kind(c.data.kind);
  options.path = c.data.path;
  options.val_path = c.data.val_path;
  options.tokenizer_path = c.data.tokenizer;
  options.val_fraction = c.data.val_fraction;
  options.task = data::parse_task_kind(c.data.task);
  options.task_digits = c.data.task_digits;
  options.seed = static_cast<uint64_t>(c.data.seed);
  return options;
}

namespace {

constexpr const char* kKeysIntro =
    "## Training config keys\n"
    "\n"
    "`octet train` starts from built-in defaults (the same values as\n"
    "`configs/train/default.json`), applies the JSON file given with `--config` (an object of\n"
    "sections; `//` comments allowed), then each `--set key=value`, which overrides one key by\n"
    "its dotted path. The value is read as JSON, or else as a bare string: `--set "
    "optimizer.lr=1e-3`,\n"
    "`--set data.path=input.txt`, `--set optimizer.betas=[0.9,0.99]`, or a whole section with\n"
    "`--set 'model={\"n_layer\":4}'`. Unknown keys, wrong types and out-of-range values are\n"
    "errors naming the key. This table is generated from the schema in `tools/config.cpp`; a\n"
    "test keeps the two equal.\n"
    "\n"
    "| key | type | default | allowed | meaning |\n"
    "|---|---|---|---|---|\n";

// The type and allowed-values columns of a key's row in the key reference.
struct TypeColumns {
  std::string type;
  std::string allowed;
};

TypeColumns type_columns(const KeySpec& s) {
  switch (s.type) {
    case KeyType::kInt:
      return {"integer", range_text(s.range)};
    case KeyType::kFloat:
      return {"number", range_text(s.range)};
    case KeyType::kBool:
      return {"boolean", "`true`, `false`"};
    case KeyType::kString:
      return {"string", "any"};
    case KeyType::kChoice:
      return {"string", choices_text(s.choices, "`")};
    case KeyType::kFloatPair:
      return {"[number, number]", "each in " + range_text(s.range)};
    case KeyType::kDevice:
      return {"string", "`cpu`, `cuda`, `cuda:N`"};
    case KeyType::kRecipe:
      return {"string or object", "a recipe file path or a recipe object"};
    case KeyType::kStringList:
      return {"[string, ...]", "any"};
  }
  return {};
}

}  // namespace

std::string keys_markdown() {
  const RunConfig defaults;
  std::string md = kKeysIntro;
  for (const Entry& e : entries()) {
    const KeySpec& s = e.spec;
    const TypeColumns columns = type_columns(s);
    md += "| `" + s.path + "` | " + columns.type + " | `" + get_value(defaults, e).dump() + "` | " +
          columns.allowed + " | " + s.doc + " |\n";
  }
  return md;
}

}  // namespace octet::config
