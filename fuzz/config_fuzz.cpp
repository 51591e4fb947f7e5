// config::load_config on any file (`octet train --config FILE`): a config, or an octet::Error
// naming the file. A config that loads re-serialises to the same values: every key the file set
// has that value in the resolved config (a recipe file path excepted: the run records the recipe
// itself), and the resolved config reads back equal.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/config_check.h"
#include "fuzz/fuzz_support.h"

namespace octet::fuzz {
namespace {

int fuzz_input(const std::string& text) {
  static const std::string path = scratch_path("config.json");
  if (names_special_file(text)) return 0;
  write_file(path, text);

  config::RunConfig c;
  if (!parses(path, [&] { c = config::load_config(path); })) return 0;
  const nlohmann::ordered_json written = check_config_round_trip(c);

  // What the file set, key by key, in the order it is applied ({"model.n_layer": 2} at the top
  // level is the same key as {"model": {"n_layer": 2}}; the last one applied wins).
  const auto given = nlohmann::ordered_json::parse(text, nullptr, true, /*ignore_comments=*/true);
  std::map<std::string, nlohmann::ordered_json> expected;
  for (const auto& [name, value] : given.items()) {
    if (name.find('.') != std::string::npos) {
      expected[name] = value;
      continue;
    }
    for (const auto& [key, leaf] : value.items()) expected[name + "." + key] = leaf;
  }
  for (const auto& [path_key, value] : expected) {
    if (path_key == "fp8.recipe" && value.is_string()) continue;
    const size_t dot = path_key.find('.');
    const nlohmann::ordered_json& now =
        written.at(path_key.substr(0, dot)).at(path_key.substr(dot + 1));
    OCTET_FUZZ_CHECK(now == value, "config key ", path_key, " was ", value.dump(), " and became ",
                     now.dump());
  }
  return 0;
}

}  // namespace
}  // namespace octet::fuzz

OCTET_FUZZ_HARNESS(octet::fuzz::fuzz_input)
