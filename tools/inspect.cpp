// The checkpoint report of `octet inspect`.
#include "tools/inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "kernels/quantized_format.h"
#include "tools/metrics.h"

namespace octet::cli {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The format table's description of a quantized format, or a note when this octet lacks it.
std::string format_layout(const std::string& format) {
  for (const std::string& known : ops::quantized_format_names()) {
    if (known == format) return ops::quantized_format(format).layout();
  }
  return "a format this octet does not know";
}

// How many amax history entries the report shows per slot.
constexpr size_t kHistoryHead = 4;

struct MetaSlot {
  std::string name;  // "layers.0.mlp.forward.1"
  float scale = 0.f;
  std::vector<float> head;
  float newest = 0.f;
};

std::vector<MetaSlot> meta_slots(const Checkpoint& c) {
  std::map<std::string, MetaSlot> slots;
  std::vector<std::string> order;
  for (const auto& [name, t] : c.model) {
    const size_t at = name.find("fp8_meta.");
    const size_t dot = name.rfind('.');
    if (at == std::string::npos) continue;
    const std::string field = name.substr(dot + 1);
    if (field != "scale" && field != "amax_history") continue;
    const std::string slot = name.substr(0, at) + name.substr(at + 9, dot - at - 9);
    if (!slots.contains(slot)) order.push_back(slot);
    MetaSlot& s = slots[slot];
    s.name = slot;
    const std::vector<float> v = t.to_floats();
    if (field == "scale") {
      s.scale = v.at(0);
    } else {
      s.head.assign(v.begin(),
                    v.begin() + static_cast<std::ptrdiff_t>(std::min(kHistoryHead, v.size())));
      s.newest = v.back();
    }
  }
  std::vector<MetaSlot> out;
  for (const auto& name : order) out.push_back(slots[name]);
  return out;
}

// The FP8 primary weights the checkpoint says it holds ("quantized" metadata): name -> entry.
nlohmann::ordered_json quantized_weights(const Checkpoint& c) {
  auto it = c.metadata.find("quantized");
  if (it == c.metadata.end()) return nlohmann::ordered_json::object();
  auto j = nlohmann::ordered_json::parse(it->second, nullptr, false);
  OCTET_CHECK(!j.is_discarded() && j.is_object(), "checkpoint ", c.path,
              ": __metadata__ \"quantized\" is not a JSON object");
  // Each entry as octet writes it (train/checkpoint.cpp), so that the report reads its values
  // with their types known: a file's bytes decide them.
  const auto is_string = [](const nlohmann::ordered_json& v) { return v.is_string(); };
  std::set<std::string> held;
  for (const auto& [name, t] : c.tensors) held.insert(name);
  for (auto e = j.begin(); e != j.end(); ++e) {  // no structured binding: the lambda uses both
    const std::string& name = e.key();
    const nlohmann::ordered_json& entry = e.value();
    const auto fail = [&](std::string_view expected) {
      OCTET_FAIL("checkpoint ", c.path, ": __metadata__ \"quantized\" entry \"", name, "\" is ",
                 entry.dump(), ", expected ", expected);
    };
    if (!entry.is_object()) fail("a JSON object");
    for (const char* key : {"format", "dtype"}) {
      if (!entry.contains(key) || !entry[key].is_string()) {
        fail(fmt::format("a string \"{}\"", key));
      }
    }
    const auto& shape = entry.contains("shape") ? entry["shape"] : nlohmann::ordered_json();
    if (!shape.is_array() || !std::all_of(shape.begin(), shape.end(),
                                          [](const auto& d) { return d.is_number_unsigned(); })) {
      fail("\"shape\": an array of non-negative integers");
    }
    const auto& tensors = entry.contains("tensors") ? entry["tensors"] : nlohmann::ordered_json();
    if (!tensors.is_array() || !std::all_of(tensors.begin(), tensors.end(), is_string)) {
      fail("\"tensors\": an array of tensor names");
    }
    for (const auto& t : tensors) {
      if (!held.contains(t.get<std::string>())) {
        fail(fmt::format("tensors the file holds (it has no \"{}\")", t.get<std::string>()));
      }
    }
    if (entry.contains("attributes")) {
      const auto& a = entry["attributes"];
      if (!a.is_object() || !std::all_of(a.begin(), a.end(), is_string)) {
        fail("\"attributes\": an object of strings");
      }
    }
  }
  return j;
}

std::string usage_of(const Checkpoint& c, const std::string& full_name, const Tensor& t) {
  if (full_name.starts_with(train::kOptimizerPrefix)) {
    return ends_with(full_name, ".master") ? "master" : "optimizer";
  }
  // FP8 metas (delayed scaling) and other FP8 state (NVFP4's stochastic-rounding streams).
  if (full_name.find("fp8_meta.") != std::string::npos ||
      full_name.find("fp8_state.") != std::string::npos) {
    return "fp8 meta";
  }
  const nlohmann::ordered_json quantized = quantized_weights(c);
  if (!quantized.empty()) {
    for (const auto& [name, entry] : quantized.items()) {
      for (const auto& member : entry.value("tensors", nlohmann::json::array())) {
        if (member == full_name) return "fp8 row-wise";
      }
    }
    return "master";
  }
  // A checkpoint without the "quantized" entry: FP8 data and the scales beside it.
  if (is_fp8(t.dtype())) return "fp8 row-wise";
  for (std::string_view suffix : {".scale_inv", ".scales"}) {
    if (!ends_with(full_name, suffix)) continue;
    const std::string data = full_name.substr(0, full_name.size() - suffix.size());
    for (const auto& [name, other] : c.tensors) {
      if (name == data && is_fp8(other.dtype())) return "fp8 row-wise";
    }
  }
  return "master";
}

}  // namespace

UsageBytes usage_bytes(const Checkpoint& c) {
  UsageBytes b;
  for (const auto& [name, t] : c.tensors) {
    const std::string usage = usage_of(c, name, t);
    const auto bytes = static_cast<int64_t>(t.nbytes());
    if (usage == "optimizer") b.optimizer += bytes;
    if (usage == "master") b.master += bytes;
    if (usage == "fp8 meta") b.fp8_meta += bytes;
    if (usage == "fp8 row-wise") b.fp8_rowwise += bytes;
  }
  return b;
}

nlohmann::ordered_json inspect_json(const Checkpoint& c) {
  nlohmann::ordered_json j;
  j["path"] = c.path;
  j["file_bytes"] = std::filesystem::file_size(c.path);
  j["trainer"] = {{"step", c.state.step},
                  {"skipped_steps", c.state.skipped_steps},
                  {"rng", {{"seed", c.state.rng.seed}, {"offset", c.state.rng.offset}}},
                  {"data_state", nlohmann::ordered_json::parse(data::encode_state(c.state.data))}};
  const UsageBytes b = usage_bytes(c);
  j["bytes_by_usage"] = {{"fp8_rowwise", b.fp8_rowwise},
                         {"fp8_columnwise", b.fp8_columnwise},
                         {"master", b.master},
                         {"optimizer", b.optimizer},
                         {"fp8_meta", b.fp8_meta}};
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const auto& [name, t] : c.tensors) {
    tensors.push_back({{"name", name},
                       {"dtype", safetensors_dtype_name(t.dtype())},
                       {"shape", t.shape()},
                       {"bytes", t.nbytes()},
                       {"usage", usage_of(c, name, t)}});
  }
  j["tensors"] = std::move(tensors);
  nlohmann::ordered_json weights = nlohmann::ordered_json::array();
  const nlohmann::ordered_json quantized = quantized_weights(c);
  for (const auto& [name, entry] : quantized.items()) {
    weights.push_back({{"name", name},
                       {"format", entry.value("format", "")},
                       {"dtype", entry.value("dtype", "")},
                       {"shape", entry.value("shape", nlohmann::json::array())},
                       {"attributes", entry.value("attributes", nlohmann::json::object())},
                       {"layout", format_layout(entry.value("format", ""))}});
  }
  j["quantized_weights"] = std::move(weights);
  nlohmann::ordered_json metas = nlohmann::ordered_json::array();
  for (const MetaSlot& s : meta_slots(c)) {
    metas.push_back({{"slot", s.name},
                     {"scale", s.scale},
                     {"amax_history_head", s.head},
                     {"amax_newest", s.newest}});
  }
  j["fp8_metas"] = std::move(metas);
  j["config"] = config::to_json(c.state.config);
  return j;
}

namespace {

// The width of the name column: the longest tensor name, and at least the header's "name".
size_t name_width(const Checkpoint& c) {
  size_t width = 4;
  for (const auto& [name, t] : c.tensors) width = std::max(width, name.size());
  return width;
}

std::string tensors_section(const Checkpoint& c, size_t width) {
  std::string out =
      fmt::format("\ntensors ({}):\n  {:<{}}  {:<8} {:<14} {:>10}  {}\n", c.tensors.size(), "name",
                  width, "dtype", "shape", "bytes", "usage");
  for (const auto& [name, t] : c.tensors) {
    out += fmt::format("  {:<{}}  {:<8} {:<14} {:>10}  {}\n", name, width,
                       safetensors_dtype_name(t.dtype()), shape_str(t.shape()), t.nbytes(),
                       usage_of(c, name, t));
  }
  return out;
}

// The formats of the FP8 primary weights, in the order they first appear.
std::vector<std::string> formats_of(const nlohmann::ordered_json& quantized) {
  std::vector<std::string> formats;
  for (const auto& [name, entry] : quantized.items()) {
    const std::string format = entry.value("format", "");
    if (std::find(formats.begin(), formats.end(), format) == formats.end()) {
      formats.push_back(format);
    }
  }
  return formats;
}

// One FP8 primary weight: name, dtype, shape and its attributes.
std::string quantized_weight_line(const std::string& name, const nlohmann::ordered_json& entry,
                                  size_t width) {
  Shape shape;
  for (const auto& d : entry.value("shape", nlohmann::ordered_json::array())) {
    shape.push_back(d.get<int64_t>());
  }
  std::string attributes;
  const nlohmann::ordered_json listed = entry.value("attributes", nlohmann::ordered_json::object());
  for (const auto& [key, value] : listed.items()) {
    attributes += fmt::format("  {}: {}", key, value.get<std::string>());
  }
  return fmt::format("    {:<{}}  {} {}{}\n", name, width, entry.value("dtype", ""),
                     shape_str(shape), attributes);
}

// The FP8 primary weights grouped by format; nothing when the checkpoint holds none.
std::string quantized_section(const Checkpoint& c, size_t width) {
  const nlohmann::ordered_json quantized = quantized_weights(c);
  if (quantized.empty()) return "";
  std::string out = fmt::format("\nFP8 primary weights ({}), by format:\n", quantized.size());
  for (const std::string& format : formats_of(quantized)) {
    out += fmt::format("  {}: {}\n", format, format_layout(format));
    for (const auto& [name, entry] : quantized.items()) {
      if (entry.value("format", "") != format) continue;
      out += quantized_weight_line(name, entry, width);
    }
  }
  return out;
}

std::string metas_section(const Checkpoint& c) {
  const std::vector<MetaSlot> slots = meta_slots(c);
  std::string out = fmt::format("\nFP8 metas ({} slots): scale, newest amax, amax history[0:{}]\n",
                                slots.size(), kHistoryHead);
  if (slots.empty()) out += "  none (FP8 off, or a recipe without state)\n";
  for (const MetaSlot& s : slots) {
    std::string head;
    for (float v : s.head) head += fmt::format("{}{:.4g}", head.empty() ? "" : ", ", v);
    out += fmt::format("  {:<32} scale {:<12.6g} amax {:<10.4g} [{}]\n", s.name, s.scale, s.newest,
                       head);
  }
  return out;
}

std::string usage_section(const Checkpoint& c) {
  const UsageBytes b = usage_bytes(c);
  std::string out = "\nbytes by usage:\n";
  out += fmt::format("  FP8 weights, row-wise     {:>12}\n", format_bytes(b.fp8_rowwise));
  out += fmt::format(
      "  FP8 weights, column-wise  {:>12}  (never stored: rebuilt from row-wise "
      "data when training needs it)\n",
      format_bytes(b.fp8_columnwise));
  out += fmt::format("  master weights            {:>12}\n", format_bytes(b.master));
  out += fmt::format("  optimizer state           {:>12}\n", format_bytes(b.optimizer));
  out += fmt::format("  FP8 metas and state       {:>12}\n", format_bytes(b.fp8_meta));
  return out;
}

}  // namespace

std::string inspect_text(const Checkpoint& c) {
  std::string out =
      fmt::format("checkpoint {} ({})\n", c.path,
                  format_bytes(static_cast<int64_t>(std::filesystem::file_size(c.path))));
  out += fmt::format("trainer: step {}, {} skipped, rng seed {} offset {}, data {}\n", c.state.step,
                     c.state.skipped_steps, c.state.rng.seed, c.state.rng.offset,
                     data::encode_state(c.state.data));
  const size_t width = name_width(c);
  out += tensors_section(c, width);
  out += quantized_section(c, width);
  out += metas_section(c);
  out += usage_section(c);
  out += "\nconfig:\n" + config::to_json(c.state.config).dump(2) + "\n";
  return out;
}

}  // namespace octet::cli
