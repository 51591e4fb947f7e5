// metrics.jsonl, FP8 health, the loss-curve SVG and the memory summary.
#include "tools/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "runtime/error.h"

namespace octet::cli {
namespace {

// JSON has no NaN or infinity; a non-finite number is written as its name so the line still
// parses and a reader sees what happened.
nlohmann::ordered_json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

}  // namespace

nlohmann::ordered_json step_json(const StepRecord& r, const std::vector<train::SlotHealth>& slots,
                                 const std::vector<train::WeightHealth>& weights) {
  nlohmann::ordered_json line;
  line["step"] = r.step;
  line["loss"] = number(r.loss);
  line["lr"] = r.lr;
  line["grad_norm"] = number(r.grad_norm);
  line["tokens_per_s"] = r.tokens_per_s;
  line["skipped_steps"] = r.skipped_steps;
  if (!slots.empty()) {
    nlohmann::ordered_json fp8 = nlohmann::ordered_json::object();
    for (const train::SlotHealth& s : slots) {
      // null, not 0, for a slot nothing was cast through since the previous log.
      auto fraction = [](const std::optional<double>& f) {
        return f ? nlohmann::ordered_json(*f) : nlohmann::ordered_json(nullptr);
      };
      fp8[s.name] = {{"scale", number(s.scale)},
                     {"amax", number(s.amax)},
                     {"amax_newest", number(s.amax_newest)},
                     {"saturated_fraction", fraction(s.saturated_fraction)},
                     {"flushed_fraction", fraction(s.flushed_fraction)}};
    }
    line["fp8_slots"] = std::move(fp8);
  }
  if (!weights.empty()) {
    nlohmann::ordered_json fp8 = nlohmann::ordered_json::object();
    for (const train::WeightHealth& w : weights) {
      fp8[w.name] = {{"saturated", w.saturated}, {"flushed_to_zero", w.flushed_to_zero}};
    }
    line["fp8_weights"] = std::move(fp8);
  }
  return line;
}

MetricsLog::MetricsLog(std::string path, MetricsOpen open, int64_t keep_through_step)
    : path_(std::move(path)) {
  std::vector<nlohmann::ordered_json> kept;
  if (open == MetricsOpen::kResumeAt) {
    std::ifstream probe(path_);
    if (probe.good()) {
      for (auto& line : read_metrics(path_)) {
        if (line.value("step", int64_t{0}) <= keep_through_step) kept.push_back(std::move(line));
      }
    }
  }
  std::ofstream out(path_, std::ios::trunc);
  OCTET_CHECK(out.good(), "cannot write ", path_);
  for (const auto& line : kept) out << line.dump() << '\n';
}

void MetricsLog::append(const nlohmann::ordered_json& line) {
  std::ofstream out(path_, std::ios::app);
  out << line.dump() << '\n';
  OCTET_CHECK(out.good(), "cannot append to ", path_);
}

std::vector<nlohmann::ordered_json> read_metrics(const std::string& path) {
  std::ifstream in(path);
  OCTET_CHECK(in.good(), "cannot open metrics file ", path);
  std::vector<nlohmann::ordered_json> lines;
  std::string text;
  for (int64_t n = 1; std::getline(in, text); ++n) {
    if (text.empty()) continue;
    auto line = nlohmann::ordered_json::parse(text, nullptr, false);
    OCTET_CHECK(!line.is_discarded() && line.is_object(), path, ":", n,
                ": not a JSON object: ", text.substr(0, 80));
    lines.push_back(std::move(line));
  }
  return lines;
}

std::string loss_curve_svg(const std::vector<CurvePoint>& loss, const std::vector<CurvePoint>& eval,
                           const std::string& eval_label) {
  constexpr double kW = 720, kH = 400, kLeft = 70, kRight = 70, kTop = 30, kBottom = 50;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  double max_step = 1;
  for (const auto& p : loss) max_step = std::max(max_step, p.step);
  for (const auto& p : eval) max_step = std::max(max_step, p.step);
  auto range = [](const std::vector<CurvePoint>& pts) {
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& p : pts) {
      if (!std::isfinite(p.value)) continue;
      lo = std::min(lo, p.value);
      hi = std::max(hi, p.value);
    }
    if (!(lo <= hi)) return std::pair{0.0, 1.0};
    return hi - lo < 1e-12 ? std::pair{lo - 0.5, hi + 0.5} : std::pair{std::min(lo, 0.0), hi};
  };
  const auto [lo, hi] = range(loss);
  const auto [elo, ehi] = range(eval);
  auto x_of = [&](double step) { return kLeft + pw * step / max_step; };
  auto polyline = [&](const std::vector<CurvePoint>& pts, double a, double b, const char* colour) {
    std::string out =
        fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points=")", colour);
    for (const auto& p : pts) {
      if (!std::isfinite(p.value)) continue;
      out += fmt::format("{:.1f},{:.1f} ", x_of(p.step), kTop + ph * (1 - (p.value - a) / (b - a)));
    }
    return out + "\"/>\n";
  };
  std::string svg = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)"
      "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kW, kH);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)"
                     "\n",
                     kLeft, kTop, pw, ph);
  for (int i = 0; i <= 4; ++i) {
    const double y = kTop + ph * i / 4.0;
    svg += fmt::format(R"(<text x="{}" y="{:.1f}" text-anchor="end" fill="#1f77b4">{:.3g}</text>)"
                       "\n",
                       kLeft - 6, y + 4, hi - (hi - lo) * i / 4.0);
    if (!eval.empty()) {
      svg += fmt::format(R"(<text x="{}" y="{:.1f}" fill="#d62728">{:.3g}</text>)"
                         "\n",
                         kW - kRight + 6, y + 4, ehi - (ehi - elo) * i / 4.0);
    }
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{:.0f}</text>)"
                       "\n",
                       kLeft + pw * i / 4.0, kH - kBottom + 18, max_step * i / 4.0);
  }
  svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">step</text>)"
                     "\n",
                     kLeft + pw / 2, kH - 10);
  svg += fmt::format(R"(<text x="{}" y="18" fill="#1f77b4">training loss</text>)"
                     "\n",
                     kLeft);
  if (!eval.empty()) {
    svg += fmt::format(R"(<text x="{}" y="18" text-anchor="end" fill="#d62728">{}</text>)"
                       "\n",
                       kW - kRight, eval_label);
  }
  svg += polyline(loss, lo, hi, "#1f77b4");
  if (!eval.empty()) svg += polyline(eval, elo, ehi, "#d62728");
  return svg + "</svg>\n";
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

std::string memory_summary(const MemoryStats& stats) {
  std::string out = "peak memory: total " + format_bytes(stats.total_peak) + ";";
  for (size_t t = 0; t < kNumMemTags; ++t) {
    out += fmt::format(" {} {}{}", mem_tag_name(static_cast<MemTag>(t)),
                       format_bytes(stats.peak[t]), t + 1 < kNumMemTags ? "," : "");
  }
  return out;
}

}  // namespace octet::cli
