// The training loop, evaluation and generation helpers of `octet train` / `eval` / `generate`.
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

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arithmetic.h"
#include "kernels/quantized_format.h"
#include "kernels/quantizer.h"
#include "modules/fp8_autocast.h"
#include "modules/optimizer.h"
#include "runtime/comm_nccl.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "runtime/parallel.h"
#include "tools/checkpoint.h"
#include "tools/metrics.h"
#include "tools/task_data.h"
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

// An FP8 scope when the run has a recipe; nothing otherwise.
class MaybeAutocast {
 public:
  explicit MaybeAutocast(const std::optional<Recipe>& recipe) {
    if (recipe) scope_.emplace(*recipe);
  }

 private:
  std::optional<modules::FP8Autocast> scope_;
};

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
  OCTET_CHECK(c.model.tie_embeddings,
              "config key \"model.tie_embeddings\" is false, but octet's GPT always ties the LM "
              "head to the token embedding: set it to true");
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
  g.activation = modules::mlp_activation_from_name(c.model.activation);
  g.norm = c.model.norm == "rmsnorm" ? modules::NormKind::kRMSNorm : modules::NormKind::kLayerNorm;
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
  if (modules::runs_fp8_modules(g)) check_fp8_width(c, *g.recipe);
  g.seed = static_cast<uint64_t>(c.training.seed);
  return g;
}

// ---- evaluation ----

std::string EvalResult::name() const {
  switch (metric) {
    case data::Metric::kExactMatch:
      return "accuracy";
    case data::Metric::kBitsPerByte:
      return "bits_per_byte";
    case data::Metric::kLoss:
      return "loss";
  }
  OCTET_FAIL("unknown metric ", static_cast<int>(metric));
}

std::string EvalResult::text() const {
  switch (metric) {
    case data::Metric::kExactMatch:
      return fmt::format("accuracy {:.1f}%", 100.0 * value);
    case data::Metric::kBitsPerByte:
      return fmt::format("bits per byte {:.4f}", value);
    case data::Metric::kLoss:
      return fmt::format("loss {:.4f}", value);
  }
  OCTET_FAIL("unknown metric ", static_cast<int>(metric));
}

Tensor generate_tokens(modules::GPT& model, const std::optional<Recipe>& recipe,
                       const Tensor& prompts, int64_t new_tokens, float temperature,
                       Generator* gen) {
  MaybeAutocast fp8(recipe);
  return model.generate(prompts, new_tokens, temperature, gen);  // (N, new_tokens)
}

// The mean loss over the first eval_batches validation batches; the validation cursor is left where
// it was, so an evaluation changes nothing a checkpoint records.
// Data parallel: rank r takes batches r, r + N, ... and the ranks add up their sums.
double heldout_loss(modules::GPT& model, data::Dataset& dataset, const config::RunConfig& c,
                    const std::optional<Recipe>& recipe, Communicator* comm) {
  autograd::NoGradGuard no_grad;
  const int64_t seq_len = run_seq_len(c, dataset);
  const data::DataState before = dataset.state();
  dataset.rewind(data::Split::kValidation);
  const int ranks = comm != nullptr ? comm->size() : 1;
  const int rank = comm != nullptr ? comm->rank() : 0;
  double sum = 0.0;
  for (int64_t b = 0; b < c.training.eval_batches; ++b) {
    const data::Batch batch =
        dataset.next_batch(data::Split::kValidation, c.training.batch_size, seq_len);
    if (b % ranks != rank) continue;
    MaybeAutocast fp8(recipe);
    sum += model.loss(batch.inputs, batch.targets).item();
  }
  dataset.set_state(before);
  if (ranks > 1) comm->all_reduce(std::span<double>(&sum, 1), ReduceOp::kSum);
  return sum / static_cast<double>(c.training.eval_batches);
}

EvalResult evaluate(modules::GPT& model, data::Dataset& dataset, const config::RunConfig& c,
                    Communicator* comm) {
  const std::optional<Recipe> recipe = run_recipe(c);
  const bool was_training = model.training();
  model.eval();
  EvalResult result;
  result.metric = dataset.metric();
  result.loss = heldout_loss(model, dataset, c, recipe, comm);
  if (auto* task = dynamic_cast<data::AlgorithmicTask*>(&dataset)) {
    const int ranks = comm != nullptr ? comm->size() : 1;
    data::ExactMatch match = task->evaluate(
        c.training.eval_examples, 256,
        [&](const Tensor& prompts, int64_t answer_len) {
          return generate_tokens(model, recipe, prompts, answer_len, 0.f, nullptr);
        },
        ranks > 1 ? comm->rank() : 0, ranks);
    if (ranks > 1) {
      double counts[2] = {static_cast<double>(match.correct), static_cast<double>(match.total)};
      comm->all_reduce(std::span<double>(counts, 2), ReduceOp::kSum);
      match.correct = static_cast<int64_t>(counts[0]);
      match.total = static_cast<int64_t>(counts[1]);
    }
    result.value = match.accuracy();
    result.examples = match.total;
    result.mistakes = match.mistakes;
  } else {
    result.value =
        result.metric == data::Metric::kBitsPerByte ? result.loss / std::log(2.0) : result.loss;
    result.examples = c.training.eval_batches * c.training.batch_size * run_seq_len(c, dataset);
  }
  if (was_training) model.train();
  return result;
}

// ---- training ----

namespace {

// The live line on a terminal, or plain lines now and then.
class Progress {
 public:
  Progress(std::ostream& out, ProgressStyle style, int64_t total, int64_t every)
      : out_(out), style_(style), total_(total), every_(every) {}

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

train::TrainerOptions trainer_options(const config::RunConfig& c) {
  train::TrainerOptions o;
  o.optimizer.kind =
      c.optimizer.kind == "sgd" ? modules::OptimizerKind::kSGD : modules::OptimizerKind::kAdamW;
  o.optimizer.beta1 = static_cast<float>(c.optimizer.betas[0]);
  o.optimizer.beta2 = static_cast<float>(c.optimizer.betas[1]);
  o.optimizer.eps = static_cast<float>(c.optimizer.eps);
  o.optimizer.weight_decay = static_cast<float>(c.optimizer.weight_decay);
  o.optimizer.momentum = static_cast<float>(c.optimizer.momentum);
  o.schedule = {static_cast<float>(c.optimizer.lr), c.schedule.warmup_steps,
                config::total_schedule_steps(c), static_cast<float>(c.schedule.min_lr_ratio)};
  o.recipe = run_recipe(c);
  o.grad_accum = c.training.grad_accum;
  o.grad_clip = c.optimizer.grad_clip;
  o.max_nonfinite_steps = 0;  // the run stops itself, naming its config key and checkpoint
  o.zero_stage =
      c.training.zero_stage == 1 ? train::ZeroStage::kOptimizerState : train::ZeroStage::kNone;
  o.grad_bucket_bytes = c.training.grad_bucket_kb * 1024;
  return o;
}

TrainResult train(const config::RunConfig& c, Resume resume, std::ostream& out, ProgressStyle style,
                  const TrainHooks& hooks) {
  const auto t0 = Clock::now();
  namespace fs = std::filesystem;
  TrainResult result;
  result.run_dir = c.output.dir;
  const std::string ckpt_path = (fs::path(c.output.dir) / kCheckpointFile).string();
  const std::string metrics_path = (fs::path(c.output.dir) / "metrics.jsonl").string();
  const std::string svg_path = (fs::path(c.output.dir) / "loss.svg").string();

  // Data parallel when a launcher started several processes; MPI is never touched otherwise.
  const LaunchInfo launch = launch_info();
  const std::shared_ptr<Communicator> world = world_communicator();
  const int rank = world->rank(), ranks = world->size();
  const bool lead = rank == 0;  // prints and writes the run directory
  // A bad launch (ranks with different configs) stops here, before anything runs.
  require_same_on_all_ranks(*world, config_items(c), "configs");
  if (!lead) style = ProgressStyle::kQuiet;

  // A CUDA device the machine lacks is "no CUDA device (reason)", never a silent CPU run.
  const Device device = rank_device(c, launch);
  require_device(device);
  if (c.training.threads > 0) {
    set_num_threads(static_cast<int>(c.training.threads));
  } else if (launch.local_size > 1) {
    // The cores this rank may run on, shared with the other ranks on the machine.
    set_num_threads(std::max(1, available_cpus() / launch.local_size));
  }
  std::unique_ptr<data::Dataset> dataset = data::open_dataset(config::data_options(c));
  const int64_t seq_len = run_seq_len(c, *dataset);
  const std::optional<Recipe> recipe = run_recipe(c);
  reset_peak_memory(device);

  modules::GPT model(gpt_config(c, *dataset));
  model.to(device);  // before the trainer's optimizer, whose state is made where parameters live
  train::TrainerOptions options = trainer_options(c);
  if (ranks > 1) options.comm = device.is_cuda() ? make_nccl_communicator(world, device) : world;
  train::Trainer trainer(model, options);
  Generator rng(static_cast<uint64_t>(c.training.seed));

  TrainerState state;
  state.config = c;
  int64_t saved_ranks = ranks;
  if (resume == Resume::kYes) {
    OCTET_CHECK(fs::exists(ckpt_path), "--resume: no checkpoint at ", ckpt_path, " (output.dir is ",
                c.output.dir, ")");
    Checkpoint ckpt;
    run_collectively(*world, [&] {
      ckpt = read_checkpoint(ckpt_path);
      check_resumable(ckpt.state.config, c, ckpt_path);
    });
    trainer.load(ckpt);
    saved_ranks = train::checkpoint_world_size(ckpt);
    try {
      dataset->set_state(ckpt.state.data);
    } catch (const Error& e) {
      OCTET_FAIL("--resume: checkpoint ", ckpt_path, ": __metadata__ \"data_state\" does not fit ",
                 dataset->describe(), ": ", e.what());
    }
    rng.set_state(ckpt.state.rng);
    state.step = ckpt.state.step;
    state.skipped_steps = ckpt.state.skipped_steps;
    OCTET_CHECK(state.step <= c.training.steps, "--resume: checkpoint ", ckpt_path, " is at step ",
                state.step, ", past training.steps ", c.training.steps);
  }
  // Rank 0 writes the run directory; the others write nothing (and wait for no file).
  std::optional<MetricsLog> metrics;
  run_collectively(*world, [&] {
    if (!lead) return;
    fs::create_directories(c.output.dir);
    remove_stale_checkpoint_files(c.output.dir);
    write_text_file((fs::path(c.output.dir) / "config.json").string(),
                    config::to_json(c).dump(2) + "\n");
    metrics.emplace(metrics_path,
                    resume == Resume::kYes ? MetricsOpen::kResumeAt : MetricsOpen::kFresh,
                    state.step);
  });
  result.start_step = state.step;

  const int64_t total = c.training.steps;
  // The global batch: every rank's rows of it together.
  const int64_t tokens_per_step =
      c.training.batch_size * seq_len * c.training.grad_accum * static_cast<int64_t>(ranks);
  const int64_t print_every = std::max<int64_t>(
      c.training.log_interval, (total / 40 + c.training.log_interval - 1) /
                                   c.training.log_interval * c.training.log_interval);
  Progress progress(out, style, total, print_every);
  progress.note(fmt::format(
      "training {} ({} parameters) on {}, {} steps of {} tokens, {}{}",
      c.model.n_layer == 1 ? "a 1-layer GPT" : fmt::format("a {}-layer GPT", c.model.n_layer),
      model.num_parameters(), dataset->describe(), total, tokens_per_step,
      recipe ? "FP8 " + describe(*recipe) : std::string("f32 (FP8 off)"),
      ranks > 1 ? fmt::format("; data parallel over {} ranks ({}{})", ranks, world->backend(),
                              c.training.zero_stage == 1 ? ", ZeRO-1" : "")
                : std::string()));
  if (resume == Resume::kYes) {
    progress.note(fmt::format(
        "resumed from {} at step {}{}", ckpt_path, state.step,
        saved_ranks == ranks
            ? std::string()
            : fmt::format(" (written by {} rank{}, continued by {}: the data stream goes on from "
                          "the same position, the global batch is now {} sequences)",
                          saved_ranks, saved_ranks == 1 ? "" : "s", ranks,
                          c.training.batch_size * ranks)));
  }

  auto save = [&] {
    state.rng = rng.state();
    state.data = dataset->state();
    trainer.save(ckpt_path, run_metadata(state));
  };
  int64_t last_saved = resume == Resume::kYes ? state.step : -1;
  auto run_eval = [&](int64_t step) {
    const EvalResult e = evaluate(model, *dataset, c, world.get());
    progress.note(fmt::format("step {}/{}: held-out {}", step, total, e.text()));
    run_collectively(*world, [&] {
      if (!lead) return;
      metrics->append({{"step", step},
                       {"world_size", ranks},
                       {"eval", {{"metric", e.name()}, {"value", e.value}, {"loss", e.loss}}}});
      // The curve is rewritten at every evaluation, so it can be watched while the run goes on.
      write_loss_curve(metrics_path, svg_path, dataset->metric());
    });
    return e;
  };

  auto interval_start = Clock::now();
  int64_t interval_tokens = 0;
  const auto loop_start = Clock::now();
  const int64_t loop_first = state.step;
  // One step's result, as the trainer reads it: under deferred reads (a GPU) several at once, at
  // the steps below that need them; in step order either way.
  auto take = [&](const train::StepResult& r) {
    result.losses.emplace_back(r.step, r.loss);
    if (r.skipped) {
      OCTET_LOG_WARN("step {}: skipped ({} in a row, training.max_nonfinite_steps {})", r.step,
                     r.nonfinite_run, c.training.max_nonfinite_steps);
    }
    if (r.nonfinite_run >= c.training.max_nonfinite_steps) {
      progress.finish();
      OCTET_FAIL("training stopped at step ", r.step, ": the loss was NaN or inf for ",
                 r.nonfinite_run, " steps in a row (training.max_nonfinite_steps ",
                 c.training.max_nonfinite_steps, "); try a lower optimizer.lr or grad clipping. ",
                 last_saved >= 0 ? fmt::format("The last good checkpoint, {} (step {}), is kept",
                                               ckpt_path, last_saved)
                                 : std::string("No checkpoint was written yet"));
    }
    const double elapsed = seconds_since(loop_start);
    const double rate =
        static_cast<double>((r.step - loop_first) * tokens_per_step) / std::max(elapsed, 1e-9);
    const double eta =
        elapsed / static_cast<double>(r.step - loop_first) * static_cast<double>(total - r.step);
    progress.step(r.step, r.loss, r.lr, rate, eta);
    if (r.step % c.training.log_interval == 0 || r.step == total) {
      StepRecord record{
          r.step,
          r.loss,
          r.lr,
          r.grad_norm,
          static_cast<double>(interval_tokens) / std::max(seconds_since(interval_start), 1e-9),
          trainer.skipped_steps(),
          ranks,
          r.comm};
      // The FP8 health is rank 0's (every rank's under reduce_amax, where they are identical).
      if (lead) {
        metrics->append(
            step_json(record, train::fp8_slot_health(model),
                      recipe ? train::fp8_weight_health(model) : std::vector<train::WeightHealth>{},
                      c.training.log_fp8_slots ? Fp8Detail::kPerSlot : Fp8Detail::kSummary));
      }
      interval_start = Clock::now();
      interval_tokens = 0;
    }
  };
  while (state.step < total) {
    const int64_t step = state.step + 1;  // 1-based: the step being run
    trainer.run_step([&](int64_t, modules::FirstMicrobatch first) {
      // This rank's rows of the global batch; every rank's cursor moves past all of it.
      const int64_t rows = c.training.batch_size;
      const data::Batch batch =
          dataset->next_rows(data::Split::kTrain, rows * ranks, seq_len, rank * rows, rows);
      Tensor loss = model.loss(batch.inputs, batch.targets, first);
      if (hooks.poison_loss && hooks.poison_loss(step)) loss = autograd::scale(loss, NAN);
      return loss;
    });
    state.step = step;
    interval_tokens += tokens_per_step;
    const bool evaluates =
        c.training.eval_interval > 0 && step % c.training.eval_interval == 0 && step != total;
    const bool checkpoints = c.training.checkpoint_interval > 0 &&
                             step % c.training.checkpoint_interval == 0 && step != total;
    const bool interrupts = hooks.interrupt_after_step > 0 && step == hooks.interrupt_after_step;
    // Deferred reads wait for the log interval (or a step that needs its result): the host
    // queues the next step while the device runs this one.
    if (trainer.deferred_reads() && step % c.training.log_interval != 0 && step != total &&
        !evaluates && !checkpoints && !interrupts) {
      continue;
    }
    bool skipped = false;
    for (const train::StepResult& r : trainer.results()) {
      take(r);
      skipped = r.skipped;  // the last one is this step's
    }
    state.skipped_steps = trainer.skipped_steps();
    if (interrupts) {
      progress.finish();
      result.end_step = step;
      result.skipped_steps = state.skipped_steps;
      result.seconds = seconds_since(t0);
      result.summary = fmt::format("interrupted after step {}", step);
      return result;
    }
    if (evaluates) run_eval(step);
    if (checkpoints && !skipped) {
      save();
      last_saved = step;
    }
  }
  progress.finish();
  const EvalResult final_eval = run_eval(state.step);
  save();
  if (lead) write_loss_curve(metrics_path, svg_path, dataset->metric());
  result.end_step = state.step;
  result.final_eval = final_eval;
  result.skipped_steps = state.skipped_steps;
  result.seconds = seconds_since(t0);
  for (const std::string& m : final_eval.mistakes) progress.note("  e.g. " + m);
  progress.note(memory_summary(memory_stats(device)) +
                (ranks > 1 ? fmt::format(" (rank 0 of {})", ranks) : std::string()));
  result.summary = fmt::format(
      "done: {} steps in {} ({} this run), {} on {} held-out {}{}; "
      "run directory {}",
      state.step, format_duration(result.seconds), state.step - result.start_step,
      final_eval.text(), final_eval.examples,
      final_eval.metric == data::Metric::kExactMatch ? "examples" : "tokens",
      state.skipped_steps > 0 ? fmt::format(", {} steps skipped (non-finite)", state.skipped_steps)
                              : std::string(),
      c.output.dir);
  if (lead) out << result.summary << '\n' << std::flush;
  return result;
}

}  // namespace octet::cli
