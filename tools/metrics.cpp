// metrics.jsonl, FP8 health, the loss-curve SVG and the memory summary.
#include "tools/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "runtime/error.h"
#include "runtime/text_file.h"

namespace octet::cli {
namespace {

// JSON has no NaN or infinity; a non-finite number is written as its name so the line still
// parses and a reader sees what happened.
nlohmann::ordered_json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

}  // namespace

namespace {

// null, not 0, for a slot nothing was cast through since the previous log.
nlohmann::ordered_json fraction(const std::optional<double>& f) {
  return f ? nlohmann::ordered_json(*f) : nlohmann::ordered_json(nullptr);
}

// A spread of dequantization scales as log2 min / median / max over its blocks; null when empty.
nlohmann::ordered_json spread_json(const BlockScaleSpread& s) {
  if (s.blocks() == 0) return nullptr;
  return {{"blocks", s.blocks()},
          {"log2_min", s.min_log2()},
          {"log2_median", s.median_log2()},
          {"log2_max", s.max_log2()}};
}

// Every slot and weight by name.
void add_fp8_detail(nlohmann::ordered_json& line, const std::vector<train::SlotHealth>& slots,
                    const std::vector<train::WeightHealth>& weights) {
  if (!slots.empty()) {
    nlohmann::ordered_json fp8 = nlohmann::ordered_json::object();
    for (const train::SlotHealth& s : slots) {
      nlohmann::ordered_json slot;
      if (s.delayed) {
        slot = {{"scale", number(s.delayed->scale)},
                {"amax", number(s.delayed->amax)},
                {"amax_newest", number(s.delayed->amax_newest)}};
      } else {
        slot = {{"scale_inv", spread_json(s.scales)}};
      }
      slot["saturated_fraction"] = fraction(s.saturated_fraction);
      slot["flushed_fraction"] = fraction(s.flushed_fraction);
      fp8[s.name] = std::move(slot);
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
}

// One summary of all slots and weights: the spread of scales (delayed: the slots' scales and the
// largest amax; stateless: log2 of every per-tensor or block scale the casts chose), the shares
// of every cast element that saturated and flushed, and the slot or weight where each is worst.
void add_fp8_summary(nlohmann::ordered_json& line, const std::vector<train::SlotHealth>& slots,
                     const std::vector<train::WeightHealth>& weights) {
  if (!slots.empty()) {
    float scale_min = INFINITY, scale_max = -INFINITY, amax = 0.f;
    bool delayed = false;
    BlockScaleSpread spread;
    FP8CastCounts all;
    const train::SlotHealth *worst_saturated = nullptr, *worst_flushed = nullptr;
    for (const train::SlotHealth& s : slots) {
      if (s.delayed) {
        delayed = true;
        scale_min = std::min(scale_min, s.delayed->scale);
        scale_max = std::max(scale_max, s.delayed->scale);
        amax = std::max(amax, s.delayed->amax);
      }
      spread.merge(s.scales);
      all += s.counts;
      if (s.saturated_fraction &&
          (!worst_saturated || *s.saturated_fraction > *worst_saturated->saturated_fraction)) {
        worst_saturated = &s;
      }
      if (s.flushed_fraction &&
          (!worst_flushed || *s.flushed_fraction > *worst_flushed->flushed_fraction)) {
        worst_flushed = &s;
      }
    }
    const auto share = [&](int64_t n) -> std::optional<double> {
      if (all.total == 0) return std::nullopt;
      return static_cast<double>(n) / static_cast<double>(all.total);
    };
    nlohmann::ordered_json fp8 = {{"slots", slots.size()}};
    if (delayed) {
      fp8["scale_min"] = number(scale_min);
      fp8["scale_max"] = number(scale_max);
      fp8["amax_max"] = number(amax);
    }
    if (!delayed || spread.blocks() > 0) fp8["scale_inv"] = spread_json(spread);
    fp8["saturated_fraction"] = fraction(share(all.saturated));
    fp8["flushed_fraction"] = fraction(share(all.flushed));
    if (worst_saturated) fp8["most_saturated"] = worst_saturated->name;
    if (worst_flushed) fp8["most_flushed"] = worst_flushed->name;
    line["fp8"] = std::move(fp8);
  }
  if (!weights.empty()) {
    const auto worst = [&](double train::WeightHealth::*field) {
      const train::WeightHealth* w = &weights.front();
      for (const train::WeightHealth& x : weights) w = x.*field > w->*field ? &x : w;
      return w;
    };
    const train::WeightHealth* sat = worst(&train::WeightHealth::saturated);
    const train::WeightHealth* flush = worst(&train::WeightHealth::flushed_to_zero);
    line["fp8_weights"] = {{"saturated_max", sat->saturated},
                           {"most_saturated", sat->name},
                           {"flushed_to_zero_max", flush->flushed_to_zero},
                           {"most_flushed", flush->name}};
  }
}

}  // namespace

nlohmann::ordered_json step_json(const StepRecord& r, const std::vector<train::SlotHealth>& slots,
                                 const std::vector<train::WeightHealth>& weights,
                                 Fp8Detail detail) {
  nlohmann::ordered_json line;
  line["step"] = r.step;
  line["loss"] = number(r.loss);
  line["lr"] = r.lr;
  line["grad_norm"] = number(r.grad_norm);
  line["tokens_per_s"] = r.tokens_per_s;
  line["skipped_steps"] = r.skipped_steps;
  line["world_size"] = r.world_size;
  if (r.world_size > 1) {
    // Payload bytes of this step: gradient buckets reduced, parameters gathered (ZeRO-1), and
    // all this rank sent to the others.
    line["comm_bytes"] = {
        {"grads", r.comm.grads}, {"params", r.comm.params}, {"sent", r.comm.sent}};
  }
  if (detail == Fp8Detail::kPerSlot) {
    add_fp8_detail(line, slots, weights);
  } else {
    add_fp8_summary(line, slots, weights);
  }
  return line;
}

namespace {

// The JSON objects of metrics.jsonl text, one a line; a malformed line names the file and line.
std::vector<nlohmann::ordered_json> parse_metrics(const std::string& text,
                                                  const std::string& path) {
  std::vector<nlohmann::ordered_json> lines;
  size_t start = 0;
  for (int64_t n = 1; start < text.size(); ++n) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    auto json = nlohmann::ordered_json::parse(line, nullptr, false);
    OCTET_CHECK(!json.is_discarded() && json.is_object(), path, ":", n,
                ": not a JSON object: ", printable(line.substr(0, 80)));
    // What is read back (a resume's cut by step, loss.svg) has the types octet writes; a loss
    // may be a number, null (NaN) or "nan"/"inf", which loss.svg leaves out.
    const auto wrong = [&](std::string_view key, std::string_view expected) {
      OCTET_FAIL(path, ":", n, ": \"", key, "\" is not ", expected, ": ",
                 printable(line.substr(0, 80)));
    };
    if (json.contains("step") && !json["step"].is_number_integer()) wrong("step", "an integer");
    if (json.contains("eval") && !json["eval"].is_object()) wrong("eval", "a JSON object");
    lines.push_back(std::move(json));
  }
  return lines;
}

}  // namespace

MetricsLog::MetricsLog(std::string path, MetricsOpen open, int64_t keep_through_step)
    : path_(std::move(path)) {
  std::string kept;
  if (open == MetricsOpen::kResumeAt && std::filesystem::exists(path_)) {
    std::string text = read_file_text(path_, "metrics file");
    // A last line without its newline is one a killed run was writing: it records a step after
    // the checkpoint (lines are written before the checkpoint of their step), so it goes.
    const size_t end = text.rfind('\n');
    text.resize(end == std::string::npos ? 0 : end + 1);
    for (auto& line : parse_metrics(text, path_)) {
      if (line.value("step", int64_t{0}) <= keep_through_step) kept += line.dump() + "\n";
    }
  }
  // Temporary file and rename: a kill mid-write keeps the old file whole.
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << kept;
    OCTET_CHECK(out.good(), "cannot write ", tmp, ": ", std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
  OCTET_CHECK(!ec, "cannot write ", path_, ": renaming ", tmp,
              " into place failed: ", ec.message());
}

void MetricsLog::append(const nlohmann::ordered_json& line) {
  std::ofstream out(path_, std::ios::app);
  out << line.dump() << '\n';
  OCTET_CHECK(out.good(), "cannot append to ", path_);
}

std::vector<nlohmann::ordered_json> read_metrics(const std::string& path) {
  return parse_metrics(read_file_text(path, "metrics file"), path);
}

std::vector<double> log_ticks(double lo, double hi) {
  OCTET_CHECK(lo > 0 && hi >= lo && std::isfinite(hi), "log_ticks: bad range [", lo, ", ", hi, "]");
  for (const std::vector<double>& mantissas :
       {std::vector<double>{1, 2, 5}, std::vector<double>{1}}) {
    std::vector<double> candidates;
    const int e0 = static_cast<int>(std::floor(std::log10(lo))) - 1;
    const int e1 = static_cast<int>(std::ceil(std::log10(hi))) + 1;
    for (int e = e0; e <= e1; ++e) {
      for (double m : mantissas) candidates.push_back(m * std::pow(10.0, e));
    }
    // From the largest candidate at most lo to the smallest at least hi (a relative slack of
    // 1e-9 so that a loss of exactly 0.2 gets the tick 0.2, not 0.1).
    size_t first = 0, last = candidates.size() - 1;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i] <= lo * (1 + 1e-9)) first = i;
    }
    for (size_t i = candidates.size(); i-- > 0;) {
      if (candidates[i] >= hi * (1 - 1e-9)) last = i;
    }
    std::vector<double> ticks(candidates.begin() + static_cast<std::ptrdiff_t>(first),
                              candidates.begin() + static_cast<std::ptrdiff_t>(last) + 1);
    if (ticks.size() < 2) ticks.push_back(ticks.back() * 10);
    if (ticks.size() <= 9 || mantissas.size() == 1) return ticks;
  }
  OCTET_FAIL("unreachable");
}

namespace {

// The SVG canvas and the margins around the plot area, in pixels.
constexpr double kW = 760, kH = 420, kLeft = 80, kRight = 80, kTop = 40, kBottom = 50;
constexpr double kPlotW = kW - kLeft - kRight, kPlotH = kH - kTop - kBottom;

// The axes of a loss curve: steps from 0 to max_step across; losses on a log axis from the
// lowest tick to the highest, and the metric (in [0, 1]) on a linear one, up.
struct Axes {
  double max_step;
  std::vector<double> ticks;
  double log_lowest;  // log10 of the lowest tick
  double decades;     // from the lowest tick to the highest

  double x_of(double step) const { return kLeft + kPlotW * step / max_step; }
  double y_log(double v) const {
    return kTop + kPlotH * (1 - (std::log10(v) - log_lowest) / decades);
  }
  double y_lin(double v) const { return kTop + kPlotH * (1 - v); }
};

Axes axes_for(const LossCurve& c) {
  Axes axes;
  axes.max_step = 1;
  for (const auto* pts : {&c.train, &c.heldout, &c.metric}) {
    for (const auto& p : *pts) axes.max_step = std::max(axes.max_step, p.step);
  }
  // The log axis covers every finite positive loss.
  double lo = INFINITY, hi = 0;
  for (const auto* pts : {&c.train, &c.heldout}) {
    for (const auto& p : *pts) {
      if (std::isfinite(p.value) && p.value > 0) {
        lo = std::min(lo, p.value);
        hi = std::max(hi, p.value);
      }
    }
  }
  if (!(lo <= hi)) lo = 1, hi = 10;
  axes.ticks = log_ticks(lo, hi);
  axes.log_lowest = std::log10(axes.ticks.front());
  const double log_highest = std::log10(axes.ticks.back());
  axes.decades = log_highest > axes.log_lowest ? log_highest - axes.log_lowest : 1;
  return axes;
}

// The opening tag, a white background and the plot area's frame.
std::string svg_frame() {
  std::string svg = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)"
      "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kW, kH);
  svg += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)"
                     "\n",
                     kLeft, kTop, kPlotW, kPlotH);
  return svg;
}

// The loss axis's grid lines and labels on the left; the metric's percentages on the right.
std::string svg_value_ticks(const Axes& axes, bool with_metric) {
  std::string svg;
  for (double t : axes.ticks) {
    const double y = axes.y_log(t);
    svg += fmt::format(R"(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#eee"/>)"
                       "\n",
                       kLeft, kLeft + kPlotW, y, y);
    svg += fmt::format(R"(<text x="{}" y="{:.1f}" text-anchor="end">{:g}</text>)"
                       "\n",
                       kLeft - 6, y + 4, t);
  }
  if (with_metric) {
    for (int pct = 0; pct <= 100; pct += 25) {
      svg += fmt::format(R"(<text x="{}" y="{:.1f}" fill="#2ca02c">{}%</text>)"
                         "\n",
                         kW - kRight + 6, axes.y_lin(pct / 100.0) + 4, pct);
    }
  }
  return svg;
}

// Round step ticks: a 1, 2 or 5 times a power of ten apart, at most 6 intervals.
double step_tick_interval(double max_step) {
  double every = 1;
  for (double e = 1; every * 6 < max_step; e *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      every = m * e;
      if (every * 6 >= max_step) break;
    }
  }
  return every;
}

// The step axis's labels and its title.
std::string svg_step_ticks(const Axes& axes) {
  std::string svg;
  const double every = step_tick_interval(axes.max_step);
  for (double s = 0; s <= axes.max_step + 1e-9; s += every) {
    svg += fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{:g}</text>)"
                       "\n",
                       axes.x_of(s), kH - kBottom + 18, s);
  }
  svg += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">step</text>)"
                     "\n",
                     kLeft + kPlotW / 2, kH - 10);
  return svg;
}

// The loss axis's title and the legend: training, held-out (when evaluated) and the metric.
std::string svg_labels(const LossCurve& c) {
  std::string svg = fmt::format(
      R"svg(<text x="16" y="{:.1f}" text-anchor="middle" transform="rotate(-90 16 {:.1f})">{} (log scale)</text>)svg"
      "\n",
      kTop + kPlotH / 2, kTop + kPlotH / 2, c.unit);
  svg += fmt::format(R"(<text x="{}" y="16" fill="#1f77b4">training {}</text>)"
                     "\n",
                     kLeft, c.unit);
  if (!c.heldout.empty()) {
    svg += fmt::format(R"(<text x="{}" y="30" fill="#d62728">held-out {}</text>)"
                       "\n",
                       kLeft, c.unit);
  }
  if (!c.metric.empty()) {
    svg += fmt::format(R"(<text x="{}" y="16" text-anchor="end" fill="#2ca02c">{}</text>)"
                       "\n",
                       kW - kRight, c.metric_label);
  }
  return svg;
}

// One series as a line, leaving out the points its axis cannot show.
std::string svg_polyline(const Axes& axes, const std::vector<CurvePoint>& pts, const char* colour,
                         const char* dash, bool log_axis) {
  std::string out = fmt::format(
      R"(<polyline fill="none" stroke="{}" stroke-width="1.5"{} points=")", colour, dash);
  for (const auto& p : pts) {
    if (!std::isfinite(p.value) || (log_axis && p.value <= 0)) continue;
    out += fmt::format("{:.1f},{:.1f} ", axes.x_of(p.step),
                       log_axis ? axes.y_log(p.value) : axes.y_lin(p.value));
  }
  return out + "\"/>\n";
}

// The evaluations are few: a dot at each.
std::string svg_eval_dots(const Axes& axes, const LossCurve& c) {
  std::string svg;
  for (const auto& p : c.heldout) {
    if (std::isfinite(p.value) && p.value > 0) {
      svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="#d62728"/>)"
                         "\n",
                         axes.x_of(p.step), axes.y_log(p.value));
    }
  }
  for (const auto& p : c.metric) {
    if (std::isfinite(p.value)) {
      svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="#2ca02c"/>)"
                         "\n",
                         axes.x_of(p.step), axes.y_lin(p.value));
    }
  }
  return svg;
}

}  // namespace

std::string loss_curve_svg(const LossCurve& c) {
  const Axes axes = axes_for(c);
  std::string svg = svg_frame();
  svg += svg_value_ticks(axes, !c.metric.empty());
  svg += svg_step_ticks(axes);
  svg += svg_labels(c);
  svg += svg_polyline(axes, c.train, "#1f77b4", "", true);
  if (!c.heldout.empty()) svg += svg_polyline(axes, c.heldout, "#d62728", "", true);
  if (!c.metric.empty()) {
    svg += svg_polyline(axes, c.metric, "#2ca02c", R"( stroke-dasharray="4 3")", false);
  }
  svg += svg_eval_dots(axes, c);
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
