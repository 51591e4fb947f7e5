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
};
nlohmann::ordered_json step_json(const StepRecord& record,
                                 const std::vector<train::SlotHealth>& slots,
                                 const std::vector<train::WeightHealth>& weights);

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

// A standalone SVG: training loss (and evaluation results, when given, on a second axis) against
// step, with labelled axes. No plotting library: the picture is a few polylines.
struct CurvePoint {
  double step;
  double value;
};
std::string loss_curve_svg(const std::vector<CurvePoint>& loss, const std::vector<CurvePoint>& eval,
                           const std::string& eval_label);

// "1.5 KiB", "12.3 MiB": for summaries.
std::string format_bytes(int64_t bytes);
// "peak memory: total 1.2 MiB; weights 120 KiB, grads 120 KiB, ..." (every tag, peak bytes).
std::string memory_summary(const MemoryStats& stats);

}  // namespace octet::cli
