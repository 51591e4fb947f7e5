// The op table's harness (tests/devices/op_table_test.cpp, modelled on ggml's test-backend-ops):
// a case runs a backend op through the public API on one device, from inputs made on the CPU
// from fixed seeds, and records its outputs, each with the rule it is compared by. The harness
// runs every case x dtype on the CPU and on the device and compares the outputs; a failure names
// the case, the dtype, the output, its shape and the first differing element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device.h"
#include "runtime/tensor.h"
#include "tests/support/test_util.h"
#include "tests/support/tolerances.h"

namespace octet::test {

// How an output of the device's run is compared with the CPU's.
enum class Rule : uint8_t {
  kBits,       // the same shape, dtype and bytes: both apply the same IEEE operations, RNE stores
  kClose,      // within parity_tolerance(op class, the output's dtype)
  kMagnitude,  // within a bound per element of its sum of |terms| (GEMMs, sums)
  kSelf,       // in every run, the same bytes as `want` of that run (a property of each device)
};

// A kClose output's row of the table: its op class, widened by `widen` where a case's shape adds
// terms (stated where it is used), for values times `scale`.
struct Within {
  OpClass op_class = OpClass::kPointwise;
  double widen = 1;
  double scale = 1;
};

struct Output {
  std::string name;
  Tensor value;  // on the CPU
  Rule rule = Rule::kBits;
  OpClass op_class = OpClass::kPointwise;  // kClose
  double widen = 1;                        // kClose
  std::vector<double> magnitude;           // kMagnitude: sum |terms| per element
  double per_magnitude = 0;                // kMagnitude: the accumulation bound
  // The output holds values times `scale` (an FP8 code of y * scale): the f32 parts of a
  // tolerance are scaled by it, the format's steps are not.
  double scale = 1;
  Tensor want;  // kSelf
  bool has_f64 = false;
  double f64 = 0;  // a host number (value())
};

// One run of a case on one device: inputs on that device, outputs recorded on the CPU.
class OpRun {
 public:
  OpRun(Device device, DType dtype) : device_(device), dtype_(dtype) {}

  Device device() const { return device_; }
  DType dtype() const { return dtype_; }  // the case's dtype axis
  bool on_cpu() const { return device_.is_cpu(); }

  // A copy of `t` (made on the CPU) on the run's device; undefined stays undefined.
  Tensor in(const Tensor& t) const {
    if (!t.defined()) return t;
    return device_.is_cpu() ? t.clone() : t.to(device_);
  }
  // The same values in a view that starts one element into its storage: never aligned to a
  // vector access, so the kernels take their one-element loop.
  Tensor misaligned(const Tensor& t) const {
    const Tensor c = on_cpu_copy(t);
    const int64_t n = c.numel();
    Tensor big = Tensor::zeros({n + 1}, c.dtype());
    std::memcpy(static_cast<uint8_t*>(big.data()) + c.element_size(), c.data(), c.nbytes());
    return in(big).slice(1, n + 1).reshape(c.shape());
  }
  Tensor misaligned_empty(const Shape& shape, DType dtype) const {
    const int64_t n = shape_numel(shape);
    return empty({n + 1}, dtype).slice(1, n + 1).reshape(shape);
  }
  Tensor empty(const Shape& shape, DType dtype) const {
    return Tensor::empty(shape, dtype, device_);
  }
  // NaN (0xFF bytes) everywhere, so an element a kernel skips shows up.
  Tensor poisoned(const Shape& shape, DType dtype) const {
    Tensor t = Tensor::empty(shape, dtype);
    poison_ff(t);
    return in(t);
  }
  Tensor scalar(float value) const { return in(Tensor::from_floats({value}, {1})); }
  // N(0, std) values of `dtype` from `seed`, on the run's device.
  Tensor random(const Shape& shape, uint64_t seed, float std = 1.f,
                DType dtype = DType::kF32) const {
    return in(random_tensor(shape, dtype, seed, std));
  }

  // ---- outputs, named within the enclosing scopes ----
  void bits(const std::string& name, const Tensor& t) { add(name, t, Rule::kBits); }
  void close(const std::string& name, const Tensor& t, Within within = {}) {
    Output& o = add(name, t, Rule::kClose);
    o.op_class = within.op_class;
    o.widen = within.widen;
    o.scale = within.scale;
  }
  // |device - cpu| <= per_magnitude * magnitude + the output format's rounding
  // (gemm_output_rounding), element by element.
  void bounded(const std::string& name, const Tensor& t, std::vector<double> magnitude,
               double per_magnitude, double scale = 1) {
    Output& o = add(name, t, Rule::kMagnitude);
    o.magnitude = std::move(magnitude);
    o.per_magnitude = per_magnitude;
    o.scale = scale;
  }
  // A host number (an f64 sum) within its class's tolerance.
  void value(const std::string& name, double v, OpClass op_class) {
    Output& o = add(name, Tensor::from_floats({static_cast<float>(v)}, {1}), Rule::kClose,
                    /*host=*/true);
    o.op_class = op_class;
    o.has_f64 = true;
    o.f64 = v;
  }
  // A fact about the run (a count, a flag, a shape) that must come out the same on both.
  void fact(const std::string& name, int64_t v) {
    Tensor t = Tensor::empty({1}, DType::kI64);
    t.data_as<int64_t>()[0] = v;
    add(name, t, Rule::kBits, /*host=*/true);
  }
  // A property of every run: `got` has `want`'s bytes (an aligned and a misaligned view agree, a
  // fused kernel equals its unfused form).
  void same(const std::string& name, const Tensor& got, const Tensor& want) {
    Output& o = add(name, got, Rule::kSelf, /*host=*/true);
    o.want = on_cpu_copy(want);
  }

  // A condition every run must meet (an input that exercises what it should, a value a rule
  // fixes).
  void expect(const std::string& name, bool holds) {
    same(name, Tensor::full({1}, holds ? 1.f : 0.f, DType::kU8),
         Tensor::full({1}, 1.f, DType::kU8));
  }

  // Output names within this scope start with `what` (a shape, a variant).
  class Scope {
   public:
    Scope(OpRun& run, std::string what) : run_(run) { run_.scopes_.push_back(std::move(what)); }
    ~Scope() { run_.scopes_.pop_back(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpRun& run_;
  };
  Scope scope(std::string what) { return Scope(*this, std::move(what)); }

  const std::vector<Output>& outputs() const { return outputs_; }

 private:
  static Tensor on_cpu_copy(const Tensor& t) {
    return t.device().is_cpu() ? t.clone() : t.to(Device::cpu());
  }
  static void poison_ff(Tensor& t) {
    if (t.nbytes() > 0) std::memset(t.data(), 0xFF, t.nbytes());
  }
  Output& add(const std::string& name, const Tensor& t, Rule rule, bool host = false) {
    std::string full;
    for (const std::string& s : scopes_) full += s + ", ";
    full += name;
    EXPECT_TRUE(t.defined()) << full << ": undefined";
    if (!host && t.defined()) {
      // An op that ran on another device than its inputs' would pass every comparison.
      EXPECT_EQ(t.device(), device_) << full << " was made on another device";
    }
    Output o;
    o.name = std::move(full);
    o.value = t.defined() ? on_cpu_copy(t) : t;
    o.rule = rule;
    outputs_.push_back(std::move(o));
    return outputs_.back();
  }

  Device device_;
  DType dtype_;
  std::vector<std::string> scopes_;
  std::vector<Output> outputs_;
};

// One row of the table: the case's name, the backend ops it runs (kernels/backend.h), the dtypes
// it takes, and what it runs.
struct OpCase {
  const char* name;
  std::vector<const char*> ops;
  std::vector<DType> dtypes;
  void (*run)(OpRun&);
};

namespace detail {

inline uint64_t bits_of_f64(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

inline std::string coords(const Shape& shape, size_t flat) {
  std::vector<int64_t> c(shape.size());
  size_t rest = flat;
  for (size_t d = shape.size(); d-- > 0;) {
    const auto n = static_cast<size_t>(std::max<int64_t>(shape[d], 1));
    c[d] = static_cast<int64_t>(rest % n);
    rest /= n;
  }
  std::string s = "[";
  for (size_t d = 0; d < c.size(); ++d) s += (d ? ", " : "") + std::to_string(c[d]);
  return s + "]";
}

inline std::string element(const Tensor& t, size_t i) {
  const size_t es = t.element_size();
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const uint8_t*>(t.data()) + i * es, es);
  std::ostringstream out;
  out.precision(9);
  out << load_as_f32(t.dtype(), t.data(), i) << " (0x" << std::hex << bits << ")";
  return out.str();
}

inline std::string describe(const Output& o) {
  return "'" + o.name + "' " + shape_str(o.value.shape()) + " " +
         std::string(dtype_name(o.value.dtype()));
}

// `got` and `want` (one output of two runs) have the same bytes.
inline ::testing::AssertionResult same_bytes(const Output& o, const Tensor& got, const Tensor& want,
                                             const char* rule) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure()
           << describe(o) << ": got " << shape_str(got.shape()) << " " << dtype_name(got.dtype())
           << ", want " << shape_str(want.shape()) << " " << dtype_name(want.dtype());
  }
  const size_t es = want.element_size(), n = static_cast<size_t>(want.numel());
  const auto* g = static_cast<const uint8_t*>(got.data());
  const auto* w = static_cast<const uint8_t*>(want.data());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(g + i * es, w + i * es, es) != 0 && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << describe(o) << " (" << rule << "): " << bad << " of " << n
         << " elements differ; first at " << coords(want.shape(), first) << ": got "
         << element(got, first) << ", want " << element(want, first);
}

// The device's output `got` against the CPU's `want` by the device run's rule.
inline ::testing::AssertionResult compare(const Output& got, const Output& want) {
  if (got.name != want.name) {
    return ::testing::AssertionFailure()
           << "the runs recorded different outputs: '" << got.name << "' and '" << want.name << "'";
  }
  switch (got.rule) {
    case Rule::kBits:
      return same_bytes(got, got.value, want.value, "bit for bit");
    case Rule::kSelf:
      return ::testing::AssertionSuccess();  // checked within each run
    case Rule::kClose:
    case Rule::kMagnitude:
      break;
  }
  const Tolerance base = scaled(parity_tolerance(got.op_class, DType::kF32), got.widen);
  if (got.has_f64) {
    if (std::fabs(got.f64 - want.f64) <= base.abs + base.rel * std::fabs(want.f64)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "'" << got.name << "' (f64): got " << got.f64 << ", want " << want.f64 << " (the "
           << op_class_name(got.op_class) << " row: abs " << base.abs << ", rel " << base.rel
           << ")";
  }
  const Tensor& gt = got.value;
  const Tensor& wt = want.value;
  if (gt.shape() != wt.shape() || gt.dtype() != wt.dtype()) {
    return same_bytes(got, gt, wt, "shape");
  }
  const DType d = wt.dtype();
  const size_t n = static_cast<size_t>(wt.numel());
  if (got.rule == Rule::kMagnitude && got.magnitude.size() != n) {
    return ::testing::AssertionFailure() << describe(got) << ": " << got.magnitude.size()
                                         << " magnitudes for " << n << " elements";
  }
  const OutputRounding out = gemm_output_rounding(d);
  size_t bad = 0, first = 0;
  double first_tol = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = load_as_f32(d, gt.data(), i), w = load_as_f32(d, wt.data(), i);
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;  // infinities included
    const double tol =
        got.rule == Rule::kClose
            ? base.abs * got.scale + format_min_step(d) + (base.rel + format_step(d)) * std::fabs(w)
            : (got.per_magnitude + out.per_magnitude) * got.magnitude[i] * got.scale +
                  out.rel * std::max(std::fabs(g), std::fabs(w)) + out.abs + 1e-30;
    if (!(std::fabs(g - w) <= tol) && bad++ == 0) {
      first = i;
      first_tol = tol;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  r << describe(got) << ": " << bad << " of " << n << " elements differ; first at "
    << coords(wt.shape(), first) << ": got " << element(gt, first) << ", want "
    << element(wt, first);
  if (got.scale != 1) r << " (values times " << got.scale << ")";
  r << "; tolerance " << first_tol;
  if (got.rule == Rule::kMagnitude) {
    r << " (sum |terms| " << got.magnitude[first] << ", bound " << got.per_magnitude << " of it)";
  } else {
    r << " (the " << op_class_name(got.op_class) << " row";
    if (got.widen != 1) r << " times " << got.widen;
    r << ")";
  }
  return r;
}

}  // namespace detail

// Checks a run's own properties (Rule::kSelf); `where` names the case, dtype and device.
inline void expect_self_consistent(const OpRun& run, const std::string& where) {
  for (const Output& o : run.outputs()) {
    if (o.rule != Rule::kSelf) continue;
    EXPECT_TRUE(detail::same_bytes(o, o.value, o.want, "within the run")) << where;
  }
}

// The device's run against the CPU's, output by output.
inline void expect_match(const OpRun& got, const OpRun& want, const std::string& where) {
  ASSERT_EQ(got.outputs().size(), want.outputs().size()) << where << ": outputs recorded";
  for (size_t i = 0; i < got.outputs().size(); ++i) {
    EXPECT_TRUE(detail::compare(got.outputs()[i], want.outputs()[i])) << where;
  }
}

// Two CPU runs: every output the same bytes (the CPU backend is deterministic).
inline void expect_identical(const OpRun& again, const OpRun& first, const std::string& where) {
  ASSERT_EQ(again.outputs().size(), first.outputs().size()) << where << ": outputs recorded";
  for (size_t i = 0; i < again.outputs().size(); ++i) {
    const Output& o = again.outputs()[i];
    const Output& f = first.outputs()[i];
    EXPECT_EQ(o.name, f.name) << where;
    EXPECT_TRUE(detail::same_bytes(o, o.value, f.value, "run twice")) << where;
    if (o.has_f64) {
      EXPECT_EQ(detail::bits_of_f64(o.f64), detail::bits_of_f64(f.f64))
          << where << ": '" << o.name << "' (f64)";
    }
  }
}

}  // namespace octet::test
