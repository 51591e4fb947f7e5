// `octet train` as wiring: the config into a dataset, a GPT and a Trainer, whose fit() runs the
// loop with the run directory (progress, metrics.jsonl, loss.svg, checkpoints) as its observer.
#include "tools/run.h"

#include <fmt/format.h>
#include <signal.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string_view>

#include "autograd/ops/arithmetic.h"
#include "kernels/quantized_format.h"
#include "kernels/quantizer.h"
#include "modules/optimizer.h"
#include "runtime/comm_nccl.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/parallel.h"
#include "tools/checkpoint.h"
#include "tools/metrics.h"
#include "train/fp8_health.h"
#include "train/trainer.h"

namespace octet::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t total = static_cast<int64_t>(std::lround(s));
  if (total < 60) return fmt::format("{}s", total);
  if (total < 3600) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
}

void write_text_file(const std::string& path, const std::string& text) {
  // Temporary file and rename, like checkpoints: a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    OCTET_CHECK(out.good(), "cannot write ", tmp, ": ", std::strerror(errno));
  }
  std::filesystem::rename(tmp, path);
}

// Temporary checkpoint files ("checkpoint.safetensors.tmp.<pid>") that a killed run left behind:
// removed when their process is gone; a live one (another run writing now) is left alone.
void remove_stale_checkpoint_files(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string prefix = std::string(kCheckpointFile) + ".tmp.";
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    int64_t pid = 0;
    const char* digits = name.data() + prefix.size();
    const auto [end, err] = std::from_chars(digits, name.data() + name.size(), pid);
    if (err != std::errc() || end != name.data() + name.size() || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    std::error_code remove_error;
    fs::remove(entry.path(), remove_error);
    if (remove_error) {
      OCTET_LOG_WARN("cannot remove stale {}: {}", entry.path().string(), remove_error.message());
    } else {
      OCTET_LOG_INFO("removed {}, left by a run that was killed while writing a checkpoint",
                     entry.path().string());
    }
  }
}

// loss.svg from metrics.jsonl: training and held-out loss in one unit (bits per byte for text,
// nats per token otherwise) and, for tasks, the held-out accuracy.
void write_loss_curve(const std::string& metrics_path, const std::string& svg_path,
                      data::Metric metric) {
  LossCurve curve;
  const bool bits = metric == data::Metric::kBitsPerByte;
  const double per_nat = bits ? 1.0 / std::log(2.0) : 1.0;
  curve.unit = bits ? "bits per byte" : "loss (nats per token)";
  for (const auto& line : read_metrics(metrics_path)) {
    const double step = line.contains("step") ? line["step"].get<double>() : 0.0;
    if (line.contains("loss") && line["loss"].is_number()) {
      curve.train.push_back({step, line["loss"].get<double>() * per_nat});
    }
    if (!line.contains("eval")) continue;
    const auto& e = line["eval"];
    if (e.contains("loss") && e["loss"].is_number()) {
      curve.heldout.push_back({step, e["loss"].get<double>() * per_nat});
    }
    if (metric == data::Metric::kExactMatch && e.contains("value") && e["value"].is_number()) {
      curve.metric.push_back({step, e["value"].get<double>()});
    }
  }
  if (metric == data::Metric::kExactMatch) curve.metric_label = "held-out accuracy (%)";
  write_text_file(svg_path, loss_curve_svg(curve));
}

// The FP8 GEMM shape rule on model.d_model, the last dimension of the GEMM operands the width
// sets, checked when the config is read: otherwise the first step fails naming an internal
// operand's shape. Token rows need no check (the model pads them to the format's multiple).
// Only for a model with a module that runs in FP8 (not every one kept in high precision).
void check_fp8_width(const config::RunConfig& c, const Recipe& recipe) {
  if (recipe.kind == RecipeKind::kCustom) return;
  for (const SlotId slot :
       {forward_slot(0, ForwardTensor::kInput), forward_slot(0, ForwardTensor::kWeight),
        backward_slot(0, BackwardTensor::kGradOutput)}) {
    const ops::QuantizedFormat& format = ops::quantized_format(quantized_format_for(recipe, slot));
    const std::string violation = format.shape_violation({format.row_multiple(), c.model.d_model});
    OCTET_CHECK(violation.empty(), "config key \"model.d_model\": ", c.model.d_model,
                " does not suit the FP8 recipe ", describe(recipe), ": ", violation,
                "; choose a model.d_model that does, or set fp8.enabled=false");
  }
}

// model.dtype as a DType: auto is bf16 on CUDA and f32 on the CPU.
DType model_dtype(const config::RunConfig& c) {
  if (c.model.dtype == "f32") return DType::kF32;
  if (c.model.dtype == "bf16") return DType::kBF16;
  OCTET_CHECK(c.model.dtype == "auto", "config key \"model.dtype\": \"", c.model.dtype,
              "\" is not a model dtype (auto, f32, bf16)");
  return parse_device(c.training.device).is_cuda() ? DType::kBF16 : DType::kF32;
}

// model.norm and optimizer.kind as their enums: every value the schema allows is named, and any
// other is an error rather than a fallback.
modules::NormKind norm_from_name(const std::string& name) {
  if (name == "layernorm") return modules::NormKind::kLayerNorm;
  if (name == "rmsnorm") return modules::NormKind::kRMSNorm;
  OCTET_FAIL("config key \"model.norm\": \"", name, "\" is not a norm (layernorm, rmsnorm)");
}
modules::OptimizerKind optimizer_from_name(const std::string& name) {
  if (name == "adamw") return modules::OptimizerKind::kAdamW;
  if (name == "sgd") return modules::OptimizerKind::kSGD;
  OCTET_FAIL("config key \"optimizer.kind\": \"", name, "\" is not an optimizer (adamw, sgd)");
}

// model.arch's value as the enum; the schema allows only these two.
modules::Arch arch_from_name(const std::string& name) {
  if (name == "gpt2") return modules::Arch::kGPT2;
  if (name == "llama") return modules::Arch::kLlama;
  OCTET_FAIL("config key \"model.arch\": \"", name, "\" is not an architecture (gpt2, llama)");
}

}  // namespace

// ---- the model a config describes ----

std::optional<Recipe> run_recipe(const config::RunConfig& config) {
  if (!config.fp8.enabled) return std::nullopt;
  const auto& r = config.fp8.recipe;
  if (r.is_string()) return load_recipe(r.get<std::string>());
  return recipe_from_json(nlohmann::json::parse(r.dump()), "fp8.recipe");
}

int64_t run_seq_len(const config::RunConfig& config, const data::Dataset& dataset) {
  const int64_t natural = dataset.natural_seq_len();
  const int64_t len = config.model.seq_len > 0 ? config.model.seq_len : natural;
  OCTET_CHECK(len > 0, "config key \"model.seq_len\" is 0 but ", dataset.describe(),
              " has no natural length: set model.seq_len");
  OCTET_CHECK(natural == 0 || len >= natural, "config key \"model.seq_len\": ", len,
              " is shorter than one example of ", dataset.describe(), " (", natural, " tokens)");
  return len;
}

modules::GPTConfig gpt_config(const config::RunConfig& c, const data::Dataset& dataset) {
  modules::GPTConfig g;
  const int64_t data_vocab = dataset.vocab_size();
  g.vocab_size = c.model.vocab > 0 ? c.model.vocab : data_vocab;
  OCTET_CHECK(g.vocab_size >= data_vocab, "config key \"model.vocab\": ", c.model.vocab,
              " is smaller than the data's vocabulary (", data_vocab, " for ", dataset.describe(),
              ")");
  g.max_seq_len = run_seq_len(c, dataset);
  g.n_layer = c.model.n_layer;
  g.d_model = c.model.d_model;
  g.n_head = c.model.n_head;
  g.arch = arch_from_name(c.model.arch);
  g.n_kv_head = c.model.n_kv_head;
  g.rope_theta = c.model.rope_theta;
  g.ffn = c.model.ffn_hidden;
  g.tie_embeddings =
      c.model.tie_embeddings ? modules::TieEmbeddings::kYes : modules::TieEmbeddings::kNo;
  g.activation = modules::mlp_activation_from_name(c.model.activation);
  g.norm = norm_from_name(c.model.norm);
  g.norm_eps = static_cast<float>(c.model.norm_eps);
  g.zero_centered_gamma = c.model.zero_centered_gamma ? modules::ZeroCenteredGamma::kYes
                                                      : modules::ZeroCenteredGamma::kNo;
  g.bias = c.model.bias ? modules::Bias::kYes : modules::Bias::kNo;
  g.recipe = run_recipe(c);
  OCTET_CHECK(!c.model.fp8_primary_weights || g.recipe.has_value(),
              "config key \"model.fp8_primary_weights\" is true but fp8.enabled is false: FP8 "
              "primary weights need an FP8 recipe");
  g.fp8_primary_weights = c.model.fp8_primary_weights ? modules::FP8PrimaryWeights::kYes
                                                      : modules::FP8PrimaryWeights::kNo;
  g.high_precision_modules = c.fp8.high_precision_modules;
  g.high_precision_first_layers = c.fp8.high_precision_first_layers;
  g.high_precision_last_layers = c.fp8.high_precision_last_layers;
  g.fp8_lm_head = c.fp8.lm_head;
  if (modules::runs_fp8_modules(g)) check_fp8_width(c, *g.recipe);
  g.dtype = model_dtype(c);
  g.seed = static_cast<uint64_t>(c.training.seed);
  return g;
}

// ---- the run ----

namespace {

// The live line on a terminal, or plain lines now and then.
class Progress {
 public:
  Progress(std::ostream& out, ProgressStyle style, int64_t total, int64_t every)
      : out_(out), style_(style), total_(total), every_(every) {}
  ~Progress() { finish(); }  // a run that throws leaves no half line behind
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void step(int64_t step, double loss, double lr, double tokens_per_s, double eta_s) {
    if (style_ == ProgressStyle::kQuiet) return;
    const std::string text =
        fmt::format("step {}/{}  loss {:.4f}  lr {:.2e}  {:.0f} tok/s  ETA {}", step, total_, loss,
                    lr, tokens_per_s, format_duration(eta_s));
    if (style_ == ProgressStyle::kLive) {
      out_ << "\r\033[K" << text << std::flush;
      live_ = true;
    } else if (step % every_ == 0 || step == total_) {
      out_ << text << '\n' << std::flush;
    }
  }
  // A line that stays (evaluations, checkpoints): clears the live line first.
  void note(const std::string& text) {
    if (style_ == ProgressStyle::kQuiet) return;
    if (live_) out_ << "\r\033[K";
    out_ << text << '\n' << std::flush;
    live_ = false;
  }
  void finish() {
    if (live_) out_ << '\n' << std::flush;
    live_ = false;
  }

 private:
  std::ostream& out_;
  ProgressStyle style_;
  int64_t total_, every_;
  bool live_ = false;
};

// Plain progress lines: about 40 a run, at multiples of the log interval.
int64_t print_every(const config::RunConfig& c) {
  const int64_t log = c.training.log_interval, total = c.training.steps;
  return std::max<int64_t>(log, (total / 40 + log - 1) / log * log);
}

}  // namespace

// Every config key as (dotted key, JSON value), in schema order: what the ranks must agree on.
std::vector<std::pair<std::string, std::string>> config_items(const config::RunConfig& c) {
  std::vector<std::pair<std::string, std::string>> items;
  const nlohmann::ordered_json json = config::to_json(c);
  for (const auto& [section, keys] : json.items()) {
    for (const auto& [key, value] : keys.items())
      items.emplace_back(section + "." + key, value.dump());
  }
  return items;
}

// The device of this rank: training.device, where a bare "cuda" under a launcher of several
// processes means the local rank's GPU.
Device rank_device(const config::RunConfig& c, const LaunchInfo& launch) {
  const Device device = parse_device(c.training.device);
  if (c.training.device == "cuda" && launch.size > 1) return Device::cuda(launch.local_rank);
  return device;
}

namespace {
// The step fp8.high_precision_after switches the forward at; -1: never.
int64_t high_precision_forward_from(const config::RunConfig& c) {
  if (!run_recipe(c) || c.fp8.high_precision_after >= 1.0) return -1;
  OCTET_CHECK(!c.model.fp8_primary_weights, "config key \"fp8.high_precision_after\" (",
              c.fp8.high_precision_after,
              ") needs high-precision weights to multiply, but model.fp8_primary_weights is true");
  return static_cast<int64_t>(
      std::floor(c.fp8.high_precision_after * static_cast<double>(c.training.steps)));
}
}  // namespace

bool forward_in_high_precision(const config::RunConfig& c, int64_t step) {
  const int64_t from = high_precision_forward_from(c);
  return from >= 0 && step >= from;
}

train::TrainerOptions trainer_options(const config::RunConfig& c) {
  train::TrainerOptions o;
  o.optimizer.kind = optimizer_from_name(c.optimizer.kind);
  o.optimizer.beta1 = static_cast<float>(c.optimizer.betas[0]);
  o.optimizer.beta2 = static_cast<float>(c.optimizer.betas[1]);
  o.optimizer.eps = static_cast<float>(c.optimizer.eps);
  o.optimizer.weight_decay = static_cast<float>(c.optimizer.weight_decay);
  o.optimizer.momentum = static_cast<float>(c.optimizer.momentum);
  o.schedule = {static_cast<float>(c.optimizer.lr), c.schedule.warmup_steps,
                config::total_schedule_steps(c), static_cast<float>(c.schedule.min_lr_ratio)};
  o.recipe = run_recipe(c);
  o.high_precision_forward_from = high_precision_forward_from(c);
  if (c.fp8.high_precision_backward && run_recipe(c)) {
    OCTET_CHECK(
        o.high_precision_forward_from < 0,
        "config keys \"fp8.high_precision_backward\" (true) and \"fp8.high_precision_after\" (",
        c.fp8.high_precision_after,
        ") would run both passes in high precision; set fp8.enabled=false instead");
    OCTET_CHECK(!c.model.fp8_primary_weights,
                "config key \"fp8.high_precision_backward\" (true) needs high-precision weights "
                "to multiply, but model.fp8_primary_weights is true");
    o.high_precision_backward = true;
  }
  o.grad_accum = c.training.grad_accum;
  o.grad_clip = c.optimizer.grad_clip;
  o.max_nonfinite_steps = c.training.max_nonfinite_steps;
  o.zero_stage =
      c.training.zero_stage == 1 ? train::ZeroStage::kOptimizerState : train::ZeroStage::kNone;
  o.grad_bucket_bytes = c.training.grad_bucket_kb * 1024;
  return o;
}

// ---- evaluation ----

train::EvalOptions eval_options(const config::RunConfig& c, const data::Dataset& dataset) {
  return {c.training.batch_size, run_seq_len(c, dataset), c.training.eval_batches,
          c.training.eval_examples};
}

EvalResult evaluate(modules::GPT& model, data::Dataset& dataset, const config::RunConfig& c,
                    Communicator* comm) {
  return train::evaluate(model, dataset, eval_options(c, dataset), run_recipe(c), comm);
}

// ---- training ----

namespace {

// The run directory as fit() fills it: progress on `out`, metrics.jsonl, loss.svg, and the run
// state every checkpoint carries. Rank 0 alone writes (`lead`).
class RunDirectory final : public train::FitObserver {
 public:
  RunDirectory(const config::RunConfig& c, Progress& progress, const train::Trainer& trainer,
               modules::GPT& model, const data::Dataset& dataset, const TrainHooks& hooks)
      : c_(c),
        progress_(progress),
        trainer_(trainer),
        model_(model),
        dataset_(dataset),
        hooks_(hooks),
        lead_(trainer.rank() == 0),
        rng_(static_cast<uint64_t>(c.training.seed)) {
    state_.config = c;
    if (const data::Tokenizer* t = dataset.tokenizer()) state_.tokenizer = *t;
  }

  // The metrics file, opened for a fresh run or cut at the resumed step (rank 0 only).
  void open(Resume resume, int64_t step) {
    metrics_.emplace(metrics_path(),
                     resume == Resume::kYes ? MetricsOpen::kResumeAt : MetricsOpen::kFresh, step);
  }
  void set_rng(const RngState& state) { rng_.set_state(state); }
  std::string metrics_path() const { return path("metrics.jsonl"); }
  std::string svg_path() const { return path("loss.svg"); }
  void write_curve() const { write_loss_curve(metrics_path(), svg_path(), dataset_.metric()); }

  void on_step(const train::StepResult& r, const train::FitProgress& p) override {
    progress_.step(r.step, r.loss, r.lr, p.tokens_per_s, p.eta_s);
  }
  void on_log(const train::StepResult& r, double tokens_per_s) override {
    if (!lead_) return;  // the FP8 health is rank 0's (identical on every rank under reduce_amax)
    const StepRecord record{r.step,
                            r.loss,
                            r.lr,
                            r.grad_norm,
                            tokens_per_s,
                            trainer_.skipped_steps(),
                            trainer_.world_size(),
                            r.comm};
    const bool fp8 = trainer_.recipe().has_value();
    metrics_->append(
        step_json(record, train::fp8_slot_health(model_),
                  fp8 ? train::fp8_weight_health(model_) : std::vector<train::WeightHealth>{},
                  c_.training.log_fp8_slots ? Fp8Detail::kPerSlot : Fp8Detail::kSummary));
  }
  void on_eval(int64_t step, const EvalResult& e) override {
    progress_.note(fmt::format("step {}/{}: held-out {}", step, c_.training.steps, e.text()));
    if (!lead_) return;
    metrics_->append({{"step", step},
                      {"world_size", trainer_.world_size()},
                      {"eval", {{"metric", e.name()}, {"value", e.value}, {"loss", e.loss}}}});
    // The curve is rewritten at every evaluation, so it can be watched while the run goes on.
    write_curve();
  }
  SafetensorsMetadata checkpoint_metadata() override {
    state_.rng = rng_.state();
    SafetensorsMetadata metadata = run_metadata(state_);
    metadata.erase(train::kDataStateKey);  // fit() writes the data position itself
    return metadata;
  }
  bool interrupt_after(int64_t step) override {
    return hooks_.interrupt_after_step > 0 && step == hooks_.interrupt_after_step;
  }

 private:
  std::string path(const char* name) const {
    return (std::filesystem::path(c_.output.dir) / name).string();
  }

  const config::RunConfig& c_;
  Progress& progress_;
  const train::Trainer& trainer_;
  modules::GPT& model_;
  const data::Dataset& dataset_;
  const TrainHooks& hooks_;
  bool lead_;
  Generator rng_;  // the run's generator, carried by checkpoints
  TrainerState state_;
  std::optional<MetricsLog> metrics_;
};

// The process's part of the run: the launch, this rank's device and threads.
struct Launch {
  LaunchInfo info;
  std::shared_ptr<Communicator> world;
  Device device;
};

Launch start_launch(const config::RunConfig& c) {
  // Data parallel when a launcher started several processes; MPI is never touched otherwise.
  Launch l{launch_info(), world_communicator(), Device::cpu()};
  // A bad launch (ranks with different configs) stops here, before anything runs.
  require_same_on_all_ranks(*l.world, config_items(c), "configs");
  // A CUDA device the machine lacks is "no CUDA device (reason)", never a silent CPU run.
  l.device = rank_device(c, l.info);
  require_device(l.device);
  if (c.training.threads > 0) {
    set_num_threads(static_cast<int>(c.training.threads));
  } else if (l.info.local_size > 1) {
    // The cores this rank may run on, shared with the other ranks on the machine.
    set_num_threads(std::max(1, available_cpus() / l.info.local_size));
  }
  return l;
}

// Restores the trainer, the data position and the run's generator from the run directory's
// checkpoint; returns how many ranks wrote it.
int64_t resume_run(const config::RunConfig& c, Communicator& world, train::Trainer& trainer,
                   data::Dataset& dataset, RunDirectory& dir) {
  const std::string path = (std::filesystem::path(c.output.dir) / kCheckpointFile).string();
  OCTET_CHECK(std::filesystem::exists(path), "--resume: no checkpoint at ", path,
              " (output.dir is ", c.output.dir, ")");
  Checkpoint ckpt;
  run_collectively(world, [&] {
    ckpt = read_checkpoint(path);
    check_resumable(ckpt.state.config, c, path);
    // The same data.tokenizer path may hold another tokenizer by now.
    const data::Tokenizer* now = dataset.tokenizer();
    OCTET_CHECK(!ckpt.state.tokenizer || now == nullptr ||
                    ckpt.state.tokenizer->serialize() == now->serialize(),
                "cannot resume from ", path, ": data.tokenizer ", c.data.tokenizer,
                " is no longer the tokenizer the checkpoint carries (", now->describe(),
                " differs from the one the run was trained with)");
  });
  trainer.resume(ckpt, dataset);
  dir.set_rng(ckpt.state.rng);
  OCTET_CHECK(trainer.steps_done() <= c.training.steps, "--resume: checkpoint ", path,
              " is at step ", trainer.steps_done(), ", past training.steps ", c.training.steps);
  return train::checkpoint_world_size(ckpt);
}

// The run directory's files before the first step (rank 0 writes; the others wait for no file).
void prepare_run_dir(const config::RunConfig& c, Communicator& world, Resume resume, int64_t step,
                     RunDirectory& dir) {
  run_collectively(world, [&] {
    if (world.rank() != 0) return;
    std::filesystem::create_directories(c.output.dir);
    remove_stale_checkpoint_files(c.output.dir);
    write_text_file((std::filesystem::path(c.output.dir) / "config.json").string(),
                    config::to_json(c).dump(2) + "\n");
    dir.open(resume, step);
  });
}

// The opening lines: what trains on what, and where a resumed run goes on from.
void announce(const config::RunConfig& c, train::Trainer& trainer, const data::Dataset& data,
              int64_t saved_ranks, Resume resume, std::string_view backend, Progress& progress) {
  const int64_t ranks = trainer.world_size();
  const std::optional<Recipe>& recipe = trainer.recipe();
  progress.note(fmt::format(
      "training {} ({} parameters) on {}, {} steps of {} tokens, {}{}",
      c.model.n_layer == 1 ? "a 1-layer GPT" : fmt::format("a {}-layer GPT", c.model.n_layer),
      trainer.model().num_parameters(), data.describe(), c.training.steps,
      c.training.batch_size * run_seq_len(c, data) * c.training.grad_accum * ranks,
      recipe ? "FP8 " + describe(*recipe) : std::string("f32 (FP8 off)"),
      ranks > 1 ? fmt::format("; data parallel over {} ranks ({}{})", ranks, backend,
                              c.training.zero_stage == 1 ? ", ZeRO-1" : "")
                : std::string()));
  if (resume == Resume::kNo) return;
  progress.note(fmt::format(
      "resumed from {} at step {}{}",
      (std::filesystem::path(c.output.dir) / kCheckpointFile).string(), trainer.steps_done(),
      saved_ranks == ranks
          ? std::string()
          : fmt::format(" (written by {} rank{}, continued by {}: the data stream goes on from "
                        "the same position, the global batch is now {} sequences)",
                        saved_ranks, saved_ranks == 1 ? "" : "s", ranks,
                        c.training.batch_size * ranks)));
}

// fit()'s options from the config; the loss takes the test hook that poisons chosen steps.
train::FitOptions fit_options(const config::RunConfig& c, const data::Dataset& dataset,
                              modules::GPT& model, const train::Trainer& trainer,
                              const TrainHooks& hooks) {
  train::FitOptions o;
  o.steps = c.training.steps;
  o.batch_size = c.training.batch_size;
  o.seq_len = run_seq_len(c, dataset);
  o.log_interval = c.training.log_interval;
  o.eval_interval = c.training.eval_interval;
  o.checkpoint_interval = c.training.checkpoint_interval;
  o.checkpoint_path = (std::filesystem::path(c.output.dir) / kCheckpointFile).string();
  o.eval = eval_options(c, dataset);
  if (hooks.poison_loss) {
    o.loss = [&model, &trainer, &hooks](const data::Batch& b, modules::FirstMicrobatch first) {
      const Tensor loss = model.loss(b.inputs, b.targets, first);
      return hooks.poison_loss(trainer.steps_done() + 1) ? autograd::scale(loss, NAN) : loss;
    };
  }
  return o;
}

// The closing lines and the run's result.
TrainResult finish_run(const config::RunConfig& c, const train::FitResult& fit, Device device,
                       int64_t ranks, double seconds, Progress& progress) {
  TrainResult r{fit.start_step,    fit.end_step, fit.losses,   fit.final_eval,
                fit.skipped_steps, seconds,      c.output.dir, ""};
  if (fit.interrupted) {
    r.summary = fmt::format("interrupted after step {}", fit.end_step);
    return r;
  }
  const EvalResult& e = *fit.final_eval;
  for (const std::string& m : e.mistakes) progress.note("  e.g. " + m);
  progress.note(memory_summary(memory_stats(device)) +
                (ranks > 1 ? fmt::format(" (rank 0 of {})", ranks) : std::string()));
  r.summary = fmt::format(
      "done: {} steps in {} ({} this run), {} on {} held-out {}{}; run directory {}", fit.end_step,
      format_duration(seconds), fit.end_step - fit.start_step, e.text(), e.examples,
      e.metric == data::Metric::kExactMatch ? "examples" : "tokens",
      fit.skipped_steps > 0 ? fmt::format(", {} steps skipped (non-finite)", fit.skipped_steps)
                            : std::string(),
      c.output.dir);
  return r;
}

}  // namespace

TrainResult train(const config::RunConfig& c, Resume resume, std::ostream& out, ProgressStyle style,
                  const TrainHooks& hooks) {
  const auto t0 = Clock::now();
  const Launch launch = start_launch(c);
  Communicator& world = *launch.world;
  if (world.rank() != 0) style = ProgressStyle::kQuiet;
  std::unique_ptr<data::Dataset> dataset = data::open_dataset(config::data_options(c));
  reset_peak_memory(launch.device);
  modules::GPT model(gpt_config(c, *dataset));
  load_init_weights(model);  // octet train --init: the weights a new run starts from
  model.to(launch.device);   // before the trainer's optimizer, made where the parameters live
  train::TrainerOptions options = trainer_options(c);
  if (world.size() > 1) {
    options.comm = launch.device.is_cuda() ? make_nccl_communicator(launch.world, launch.device)
                                           : launch.world;
  }
  // A step that draws host random numbers (NVFP4's stochastic rounding and random signs) or
  // talks to other ranks runs eagerly.
  options.cuda_graphs = c.training.cuda_graphs && launch.device.is_cuda() && world.size() == 1 &&
                        !(options.recipe && options.recipe->uses_rng_streams());
  train::Trainer trainer(model, options);
  Progress progress(out, style, c.training.steps, print_every(c));
  RunDirectory dir(c, progress, trainer, model, *dataset, hooks);
  const int64_t saved_ranks =
      resume == Resume::kYes ? resume_run(c, world, trainer, *dataset, dir) : world.size();
  prepare_run_dir(c, world, resume, trainer.steps_done(), dir);
  announce(c, trainer, *dataset, saved_ranks, resume, world.backend(), progress);
  const train::FitResult fit =
      trainer.fit(*dataset, fit_options(c, *dataset, model, trainer, hooks), &dir);
  progress.finish();
  if (world.rank() == 0 && !fit.interrupted) dir.write_curve();
  TrainResult r = finish_run(c, fit, launch.device, world.size(), seconds_since(t0), progress);
  if (world.rank() == 0 && !fit.interrupted) out << r.summary << '\n' << std::flush;
  return r;
}

}  // namespace octet::cli
