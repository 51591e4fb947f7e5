// Helpers shared by the module tests.
#pragma once

#include <optional>
#include <utility>

#include "modules/fp8_autocast.h"
#include "runtime/recipe.h"

namespace octet::test {

// Runs f() inside an FP8 scope with *recipe, or in high precision when recipe is null. The scope
// closes (updating forward scales) after f's result is made, as with a scope around the call.
template <typename F>
auto with_fp8(const Recipe* recipe, F&& f) {
  std::optional<modules::FP8Autocast> scope;
  if (recipe != nullptr) scope.emplace(*recipe);
  return std::forward<F>(f)();
}

}  // namespace octet::test
