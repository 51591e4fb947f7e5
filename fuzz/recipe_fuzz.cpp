// load_recipe on any file: a recipe, or an octet::Error naming the file. A recipe that loads
// writes every key of its kind, reads back equal, and keeps the value of each key the file gave.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_support.h"
#include "runtime/recipe.h"

namespace octet::fuzz {
namespace {

int fuzz_input(const std::string& text) {
  static const std::string path = scratch_path("recipe.json");
  write_file(path, text);

  Recipe recipe;
  if (!parses(path, [&] { recipe = load_recipe(path); })) return 0;

  const nlohmann::json written = recipe_to_json(recipe);
  Recipe back;
  if (!parses("", [&] { back = parse_recipe(written.dump()); })) {
    fail("the JSON of a recipe that loaded does not load: " + written.dump());
  }
  OCTET_FUZZ_CHECK(back == recipe, "recipe ", describe(recipe), " read back as ", describe(back));

  // Each key of the file has the value the file gave it (amax_epsilon as the f32 it is kept in).
  const nlohmann::json given = nlohmann::json::parse(text);
  for (const auto& [key, value] : given.items()) {
    OCTET_FUZZ_CHECK(written.contains(key), "key \"", key, "\" is lost: ", written.dump());
    if (key == "amax_epsilon") {
      OCTET_FUZZ_CHECK(
          static_cast<float>(value.get<double>()) == static_cast<float>(written[key].get<double>()),
          "amax_epsilon ", value.dump(), " became ", written[key].dump());
    } else {
      OCTET_FUZZ_CHECK(value == written[key], "key \"", key, "\" was ", value.dump(),
                       " and became ", written[key].dump());
    }
  }
  return 0;
}

}  // namespace
}  // namespace octet::fuzz

OCTET_FUZZ_HARNESS(octet::fuzz::fuzz_input)
