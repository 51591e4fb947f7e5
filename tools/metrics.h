// What a training run records besides checkpoints: metrics.jsonl lines with FP8 health, a
// loss-curve SVG written by hand, and the memory summary by allocation tag.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "modules/module.h"
#include "runtime/memory.h"
#include "runtime/recipe.h"
#include "train/data_parallel.h"
#include "train/fp8_health.h"

namespace octet::cli {

// What one metrics.jsonl line says about a logged step.
struct StepRecord {
  int64_t step = 0;  // optimizer steps done
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  double tokens_per_s = 0.0;
  int64_t skipped_steps = 0;  // non-finite steps skipped so far in this run
  int64_t world_size = 1;     // ranks training data-parallel
  train::CommBytes comm;      // what the step communicated (world_size > 1)
};
// kSummary (the default, training.log_fp8_slots = false): one "fp8" object for all slots (scale
// spread, largest amax, the shares of all cast elements saturated and flushed, the worst slot of
// each) and one "fp8_weights" (the worst weight of each). kPerSlot: "fp8_slots" and
// "fp8_weights" with every slot and weight by name.
enum class Fp8Detail : uint8_t { kSummary, kPerSlot };
nlohmann::ordered_json step_json(const StepRecord& record,
                                 const std::vector<train::SlotHealth>& slots,
                                 const std::vector<train::WeightHealth>& weights,
                                 Fp8Detail detail = Fp8Detail::kSummary);

// Appends lines to metrics.jsonl. Opening for a resumed run keeps only the lines whose "step" is
// at most `keep_through_step`, so steps redone after an interruption are not listed twice.
enum class MetricsOpen : uint8_t { kFresh, kResumeAt };
class MetricsLog {
 public:
  MetricsLog(std::string path, MetricsOpen open, int64_t keep_through_step = 0);
  void append(const nlohmann::ordered_json& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Every line of a metrics.jsonl file (throws naming the file and line when one is malformed).
std::vector<nlohmann::ordered_json> read_metrics(const std::string& path);

// A standalone SVG of a run against step, written by hand (no plotting library): the training
// loss and the held-out loss in one unit on a log-scale axis with round ticks (1, 2, 5 per
// decade), and a held-out metric in [0, 1] (exact-match accuracy) on a second axis in percent.
struct CurvePoint {
  double step;
  double value;
};
struct LossCurve {
  std::string unit;                 // the loss axis: "loss (nats per token)", "bits per byte"
  std::vector<CurvePoint> train;    // training loss, in `unit`
  std::vector<CurvePoint> heldout;  // held-out loss, in `unit`
  std::string metric_label;         // the second axis ("held-out accuracy (%)"); empty: none
  std::vector<CurvePoint> metric;   // in [0, 1]
};
std::string loss_curve_svg(const LossCurve& curve);
// The round ticks (1, 2 and 5 times a power of ten) of a log axis covering [lo, hi] (lo > 0):
// the first is at most lo, the last at least hi; only powers of ten when that would be more than
// nine ticks.
std::vector<double> log_ticks(double lo, double hi);

// "1.5 KiB", "12.3 MiB": for summaries.
std::string format_bytes(int64_t bytes);
// "peak memory: total 1.2 MiB; weights 120 KiB, grads 120 KiB, ..." (every tag, peak bytes).
std::string memory_summary(const MemoryStats& stats);

}  // namespace octet::cli
