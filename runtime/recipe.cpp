// Recipe JSON: one checked reader per key type, so every error names the key and the expectation.
#include "runtime/recipe.h"

#include <cfloat>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "runtime/error.h"
#include "runtime/named.h"
#include "runtime/text_file.h"

namespace octet {
namespace {

using nlohmann::json;

constexpr int kMaxMargin = 64;
constexpr int64_t kMaxHistoryLen = int64_t{1} << 20;

// The JSON type of a value, for "got ..." in messages.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(value.type_name()) + " " + text;
}

std::string join(const std::vector<std::string_view>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i ? ", " : "") + std::string(names[i]);
  return text;
}

class Reader {
 public:
  Reader(const json& object, std::string_view where) : object_(object), where_(where) {}

  std::string key(std::string_view name) const { return where_ + "." + std::string(name); }

  const json* find(std::string_view name) const {
    auto it = object_.find(std::string(name));
    return it == object_.end() ? nullptr : &*it;
  }

  // One of `choices`; returns its index.
  size_t choice(std::string_view name, const std::vector<std::string_view>& choices,
                size_t fallback) const {
    const json* v = find(name);
    if (v == nullptr) return fallback;
    const std::string list = join(choices);
    OCTET_CHECK(v->is_string(), key(name), ": expected a string (one of ", list, "), got ",
                shown(*v));
    const std::string s = v->get<std::string>();
    for (size_t i = 0; i < choices.size(); ++i) {
      if (s == choices[i]) return i;
    }
    OCTET_FAIL(key(name), ": expected one of ", list, ", got \"", s, "\"");
  }

  int64_t integer(std::string_view name, int64_t lo, int64_t hi, int64_t fallback) const {
    const json* v = find(name);
    if (v == nullptr) return fallback;
    OCTET_CHECK(v->is_number_integer(), key(name), ": expected an integer in [", lo, ", ", hi,
                "], got ", shown(*v));
    // Unsigned JSON integers above int64's range are out of range too.
    bool in_range = false;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      in_range = u <= static_cast<uint64_t>(hi) && (lo <= 0 || u >= static_cast<uint64_t>(lo));
    } else {
      in_range = v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
    }
    OCTET_CHECK(in_range, key(name), ": expected an integer in [", lo, ", ", hi, "], got ",
                v->dump());
    return v->get<int64_t>();
  }

  bool boolean(std::string_view name, bool fallback) const {
    const json* v = find(name);
    if (v == nullptr) return fallback;
    OCTET_CHECK(v->is_boolean(), key(name), ": expected true or false, got ", shown(*v));
    return v->get<bool>();
  }

  // A finite number >= 0 that fits in f32.
  float non_negative_float(std::string_view name, float fallback) const {
    const json* v = find(name);
    if (v == nullptr) return fallback;
    OCTET_CHECK(v->is_number(), key(name), ": expected a number >= 0, got ", shown(*v));
    const double d = v->get<double>();
    OCTET_CHECK(std::isfinite(d) && d >= 0 && d <= FLT_MAX, key(name),
                ": expected a finite number >= 0 (at most ", FLT_MAX, "), got ", v->dump());
    return static_cast<float>(d);
  }

  void reject_unknown(const std::vector<std::string_view>& known,
                      std::string_view recipe_name) const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || it.key() == k;
      OCTET_CHECK(ok, key(it.key()), ": unknown key for the '", recipe_name,
                  "' recipe (its keys: ", join(known), ")");
    }
  }

 private:
  const json& object_;
  std::string where_;
};

// Each value recipe JSON can name, keyed by the enum value (never by its ordinal); "custom" is
// made in code only.
constexpr Named<RecipeKind> kKinds[] = {
    {RecipeKind::kDelayed, "delayed"}, {RecipeKind::kCurrent, "current"},
    {RecipeKind::kMXFP8, "mxfp8"},     {RecipeKind::kBlockwise, "blockwise"},
    {RecipeKind::kNVFP4, "nvfp4"},     {RecipeKind::kRowwise, "rowwise"}};
constexpr Named<NVFP4Scope> kScopes[] = {{NVFP4Scope::kNone, "none"},
                                         {NVFP4Scope::kWeights, "weights"},
                                         {NVFP4Scope::kActivations, "activations"},
                                         {NVFP4Scope::kAll, "all"}};
constexpr Named<NVFP4Method> kMethods[] = {{NVFP4Method::kTE, "te"},
                                           {NVFP4Method::kQuartet2, "quartet2"}};
constexpr Named<FP8Format> kFormats[] = {{FP8Format::kE4M3, "e4m3"},
                                         {FP8Format::kHybrid, "hybrid"}};
constexpr Named<FP8Format> kE4M3Only[] = {{FP8Format::kE4M3, "e4m3"}};  // MXFP8
constexpr Named<AmaxComputeAlgo> kAlgos[] = {{AmaxComputeAlgo::kMax, "max"},
                                             {AmaxComputeAlgo::kMostRecent, "most_recent"}};

// The value `key` names (table[default_index] when absent), checked as Reader::choice checks.
template <typename E, size_t N>
E choose(const Reader& in, std::string_view key, const Named<E> (&table)[N], size_t default_index) {
  return table[in.choice(key, names_in(table), default_index)].value;
}

}  // namespace

std::string_view recipe_kind_name(RecipeKind kind) {
  switch (kind) {
    case RecipeKind::kDelayed:
    case RecipeKind::kCurrent:
    case RecipeKind::kMXFP8:
    case RecipeKind::kBlockwise:
    case RecipeKind::kNVFP4:
    case RecipeKind::kRowwise:
      return name_in(kKinds, kind);
    case RecipeKind::kCustom:
      return "custom";
  }
  OCTET_FAIL("unknown recipe kind ", static_cast<int>(kind));
}
std::string_view fp8_format_name(FP8Format format) { return name_in(kFormats, format); }
std::string_view amax_compute_algo_name(AmaxComputeAlgo algo) { return name_in(kAlgos, algo); }

std::string_view nvfp4_scope_name(NVFP4Scope scope) { return name_in(kScopes, scope); }
std::string_view nvfp4_method_name(NVFP4Method method) { return name_in(kMethods, method); }

namespace {
// A recipe of `kind` in `format`, every other field at its default.
Recipe recipe_of(RecipeKind kind, FP8Format format) {
  Recipe r;
  r.kind = kind;
  r.fp8_format = format;
  return r;
}
}  // namespace

Recipe Recipe::delayed(FP8Format format, int margin, int64_t amax_history_len,
                       AmaxComputeAlgo algo) {
  OCTET_CHECK(margin >= 0 && margin <= kMaxMargin, "delayed recipe: margin ", margin,
              " outside [0, ", kMaxMargin, "]");
  OCTET_CHECK(amax_history_len >= 1 && amax_history_len <= kMaxHistoryLen,
              "delayed recipe: amax_history_len ", amax_history_len, " outside [1, ",
              kMaxHistoryLen, "]");
  Recipe r = recipe_of(RecipeKind::kDelayed, format);
  r.margin = margin;
  r.amax_history_len = amax_history_len;
  r.amax_compute_algo = algo;
  return r;
}

Recipe Recipe::current(FP8Format format) { return recipe_of(RecipeKind::kCurrent, format); }

Recipe Recipe::mxfp8() { return recipe_of(RecipeKind::kMXFP8, FP8Format::kE4M3); }

Recipe Recipe::blockwise(FP8Format format) {
  Recipe r = recipe_of(RecipeKind::kBlockwise, format);
  r.power_2_scale = true;
  return r;
}

// fp8_format: the format of the block scales.
Recipe Recipe::nvfp4() { return recipe_of(RecipeKind::kNVFP4, FP8Format::kE4M3); }

Recipe Recipe::rowwise(FP8Format format) {
  Recipe r = recipe_of(RecipeKind::kRowwise, format);
  r.power_2_scale = true;
  return r;
}

Recipe Recipe::nvfp4_quartet2() {
  Recipe r = nvfp4();
  r.nvfp4_method = NVFP4Method::kQuartet2;
  // Its forward in TE's terms: 1x16 blocks, 4over6 by MSE with the 256 bound, round to nearest;
  // the backward is the method's own (no TE switch applies).
  r.random_hadamard_transform = false;
  r.stochastic_rounding = false;
  r.weight_2d_quantization = false;
  r.four_over_six = NVFP4Scope::kAll;
  r.four_over_six_e4m3_256 = NVFP4Scope::kAll;
  r.four_over_six_mse = true;
  return r;
}

bool Recipe::uses_rng_streams() const {
  switch (kind) {
    case RecipeKind::kNVFP4:
      return stochastic_rounding || nvfp4_method == NVFP4Method::kQuartet2;
    case RecipeKind::kDelayed:
    case RecipeKind::kCurrent:
    case RecipeKind::kMXFP8:
    case RecipeKind::kBlockwise:
    case RecipeKind::kRowwise:
    case RecipeKind::kCustom:
      return false;
  }
  OCTET_FAIL("unknown recipe kind ", static_cast<int>(kind));
}

Recipe Recipe::custom_recipe(std::shared_ptr<const CustomRecipe> factory) {
  OCTET_CHECK(factory != nullptr, "custom recipe: the quantizer factory is null");
  Recipe r;
  r.kind = RecipeKind::kCustom;
  r.custom = std::move(factory);
  return r;
}

bool Recipe::uses_fp8_meta() const {
  switch (kind) {
    case RecipeKind::kDelayed:
      return true;
    case RecipeKind::kCurrent:
    case RecipeKind::kMXFP8:
    case RecipeKind::kBlockwise:
    case RecipeKind::kNVFP4:
    case RecipeKind::kRowwise:
    case RecipeKind::kCustom:
      return false;
  }
  OCTET_FAIL("unknown recipe kind ", static_cast<int>(kind));
}

BlockScaling Recipe::block_scaling(SlotId slot) const {
  if (slot.direction == FP8Direction::kBackward) return grad_block_scaling;
  return slot.index % kForwardSlotsPerGemm == static_cast<int>(ForwardTensor::kWeight)
             ? w_block_scaling
             : x_block_scaling;
}

DType Recipe::dtype(FP8Direction direction) const {
  switch (kind) {
    case RecipeKind::kCustom:
      return custom->dtype(direction);
    case RecipeKind::kNVFP4:
      return DType::kU8;  // two E2M1 values a byte
    case RecipeKind::kDelayed:
    case RecipeKind::kCurrent:
    case RecipeKind::kMXFP8:
    case RecipeKind::kBlockwise:
    case RecipeKind::kRowwise:
      return fp8_format == FP8Format::kHybrid && direction == FP8Direction::kBackward
                 ? DType::kE5M2
                 : DType::kE4M3;
  }
  OCTET_FAIL("unknown recipe kind ", static_cast<int>(kind));
}

Recipe recipe_from_json(const json& object, std::string_view where) {
  OCTET_CHECK(object.is_object(), where, ": expected a JSON object, got ", shown(object));
  const Reader in(object, where);
  OCTET_CHECK(in.find("recipe") != nullptr, in.key("recipe"), ": missing (one of ",
              join(names_in(kKinds)), ")");
  Recipe r;
  r.kind = choose(in, "recipe", kKinds, 0);
  switch (r.kind) {
    case RecipeKind::kDelayed:
      in.reject_unknown({"recipe", "fp8_format", "margin", "amax_history_len", "amax_compute_algo",
                         "reduce_amax"},
                        "delayed");
      r.fp8_format = choose(in, "fp8_format", kFormats, 1);
      r.margin = static_cast<int>(in.integer("margin", 0, kMaxMargin, 0));
      r.amax_history_len = in.integer("amax_history_len", 1, kMaxHistoryLen, 1024);
      r.amax_compute_algo = choose(in, "amax_compute_algo", kAlgos, 0);
      r.reduce_amax = in.boolean("reduce_amax", true);
      break;
    case RecipeKind::kCurrent:
      in.reject_unknown({"recipe", "fp8_format", "power_2_scale", "amax_epsilon"}, "current");
      r.fp8_format = choose(in, "fp8_format", kFormats, 1);
      r.power_2_scale = in.boolean("power_2_scale", false);
      r.amax_epsilon = in.non_negative_float("amax_epsilon", 0.f);
      break;
    case RecipeKind::kMXFP8:
      in.reject_unknown({"recipe", "fp8_format"}, "mxfp8");
      // MXFP8 uses e4m3 for every tensor; the key is accepted only to say so explicitly.
      r.fp8_format = choose(in, "fp8_format", kE4M3Only, 0);
      break;
    case RecipeKind::kBlockwise: {
      in.reject_unknown({"recipe", "fp8_format", "power_2_scale", "amax_epsilon",
                         "x_block_scaling_dim", "w_block_scaling_dim", "grad_block_scaling_dim"},
                        "blockwise");
      r.fp8_format = choose(in, "fp8_format", kFormats, 0);
      r.power_2_scale = in.boolean("power_2_scale", true);
      r.amax_epsilon = in.non_negative_float("amax_epsilon", 0.f);
      r.x_block_scaling = static_cast<BlockScaling>(in.integer("x_block_scaling_dim", 1, 2, 1));
      r.w_block_scaling = static_cast<BlockScaling>(in.integer("w_block_scaling_dim", 1, 2, 2));
      r.grad_block_scaling =
          static_cast<BlockScaling>(in.integer("grad_block_scaling_dim", 1, 2, 1));
      // Each GEMM multiplies two of the three roles: fprop x and w, dgrad grad and w, wgrad grad
      // and x. Two 128x128-blocked operands have no block-scaled GEMM (TE refuses them too).
      const std::pair<const char*, const char*> pairs[] = {
          {"x", "w"}, {"w", "grad"}, {"x", "grad"}};
      auto dim = [&](std::string_view role) {
        return role == "x"   ? r.x_block_scaling
               : role == "w" ? r.w_block_scaling
                             : r.grad_block_scaling;
      };
      for (const auto& [a, b] : pairs) {
        OCTET_CHECK(dim(a) == BlockScaling::k1D || dim(b) == BlockScaling::k1D, where, ".", a,
                    "_block_scaling_dim and ", where, ".", b,
                    "_block_scaling_dim are both 2: a GEMM of two 128x128-blocked operands is not "
                    "supported (2D by 2D); make one of them 1");
      }
      break;
    }
    case RecipeKind::kRowwise:
      in.reject_unknown({"recipe", "fp8_format", "power_2_scale", "amax_epsilon"}, "rowwise");
      r.fp8_format = choose(in, "fp8_format", kFormats, 0);
      r.power_2_scale = in.boolean("power_2_scale", true);
      r.amax_epsilon = in.non_negative_float("amax_epsilon", 0.f);
      break;
    case RecipeKind::kNVFP4:
      in.reject_unknown({"recipe", "method", "disable_rht", "disable_stochastic_rounding",
                         "disable_2d_quantization", "nvfp4_4over6", "nvfp4_4over6_e4m3_use_256",
                         "nvfp4_4over6_err_mode"},
                        "nvfp4");
      if (choose(in, "method", kMethods, 0) == NVFP4Method::kQuartet2) {
        // The method fixes every cast but the forward's 4over6 (the reference's switch); TE's
        // other switches would silently mean nothing.
        in.reject_unknown({"recipe", "method", "nvfp4_4over6"}, "nvfp4 (method quartet2)");
        r = Recipe::nvfp4_quartet2();
        r.four_over_six = choose(in, "nvfp4_4over6", kScopes, 3);
        break;
      }
      r.fp8_format = FP8Format::kE4M3;
      r.random_hadamard_transform = !in.boolean("disable_rht", false);
      r.stochastic_rounding = !in.boolean("disable_stochastic_rounding", false);
      r.weight_2d_quantization = !in.boolean("disable_2d_quantization", false);
      r.four_over_six = choose(in, "nvfp4_4over6", kScopes, 0);
      r.four_over_six_e4m3_256 = choose(in, "nvfp4_4over6_e4m3_use_256", kScopes, 3);
      r.four_over_six_mse = in.choice("nvfp4_4over6_err_mode", {"MAE", "MSE"}, 0) == 1;
      // An activation's column-wise copy gets the transform: 4over6 has none (TE refuses it).
      OCTET_CHECK(!covers_activations(r.four_over_six) || !r.random_hadamard_transform, where,
                  ".nvfp4_4over6: \"", nvfp4_scope_name(r.four_over_six),
                  "\" casts activations with 4over6, which has no random Hadamard transform (their "
                  "column-wise copy gets one); set \"disable_rht\": true, or choose \"weights\"");
      break;
    case RecipeKind::kCustom:
      OCTET_FAIL("unreachable: \"custom\" is not among the JSON recipe names");
  }
  return r;
}

Recipe parse_recipe(std::string_view text, std::string_view where) {
  return with_error_context(std::string(where), [&] {
    json object;
    try {
      object = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e999
      OCTET_FAIL(where, ": invalid JSON: ", json_error_text(e.what()));
    }
    return recipe_from_json(object, where);
  });
}

Recipe load_recipe(const std::string& path) {
  return parse_recipe(read_file_text(path, "recipe file"), printable(path) + ": recipe");
}

json recipe_to_json(const Recipe& r) {
  json out;
  out["recipe"] = recipe_kind_name(r.kind);
  if (r.kind == RecipeKind::kCustom) {
    out["name"] = r.custom->name();
    return out;
  }
  if (r.is_quartet2()) {
    out["method"] = nvfp4_method_name(r.nvfp4_method);
    out["nvfp4_4over6"] = nvfp4_scope_name(r.four_over_six);
    return out;
  }
  if (r.kind == RecipeKind::kNVFP4) {
    out["method"] = nvfp4_method_name(r.nvfp4_method);
    out["disable_rht"] = !r.random_hadamard_transform;
    out["disable_stochastic_rounding"] = !r.stochastic_rounding;
    out["disable_2d_quantization"] = !r.weight_2d_quantization;
    out["nvfp4_4over6"] = nvfp4_scope_name(r.four_over_six);
    out["nvfp4_4over6_e4m3_use_256"] = nvfp4_scope_name(r.four_over_six_e4m3_256);
    out["nvfp4_4over6_err_mode"] = r.four_over_six_mse ? "MSE" : "MAE";
    return out;
  }
  out["fp8_format"] = fp8_format_name(r.fp8_format);
  switch (r.kind) {
    case RecipeKind::kDelayed:
      out["margin"] = r.margin;
      out["amax_history_len"] = r.amax_history_len;
      out["amax_compute_algo"] = amax_compute_algo_name(r.amax_compute_algo);
      out["reduce_amax"] = r.reduce_amax;
      break;
    case RecipeKind::kCurrent:
    case RecipeKind::kRowwise:
      out["power_2_scale"] = r.power_2_scale;
      out["amax_epsilon"] = r.amax_epsilon;
      break;
    case RecipeKind::kBlockwise:
      out["power_2_scale"] = r.power_2_scale;
      out["amax_epsilon"] = r.amax_epsilon;
      out["x_block_scaling_dim"] = static_cast<int>(r.x_block_scaling);
      out["w_block_scaling_dim"] = static_cast<int>(r.w_block_scaling);
      out["grad_block_scaling_dim"] = static_cast<int>(r.grad_block_scaling);
      break;
    case RecipeKind::kMXFP8:
    case RecipeKind::kNVFP4:
    case RecipeKind::kCustom:
      break;
  }
  return out;
}

std::string describe(const Recipe& recipe) { return recipe_to_json(recipe).dump(); }

}  // namespace octet
