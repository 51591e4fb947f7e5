// `octet train --set KEY=VALUE ...` on any lines, one --set per line: a config, or an
// octet::Error. A config that loads re-serialises to the same values: the key of the last
// assignment has the value it gave (when it was JSON of the key's own type), and the resolved
// config reads back equal.
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/config_check.h"
#include "fuzz/fuzz_support.h"

namespace octet::fuzz {
namespace {

int fuzz_input(const std::string& text) {
  if (names_special_file(text)) return 0;
  std::vector<std::string> lines;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }

  config::RunConfig c;
  if (!parses("", [&] { c = config::load_config("", lines); })) return 0;
  const nlohmann::ordered_json written = check_config_round_trip(c);

  // The last line set a key: its value is the line's JSON, or the bare text as a string.
  const std::string& last = lines.back();
  const std::string key = last.substr(0, last.find('='));
  const config::KeySpec* spec = config::find_key(key);
  if (spec == nullptr || spec->type == config::KeyType::kRecipe) return 0;
  const std::string value_text = last.substr(key.size() + 1);
  const auto parsed = nlohmann::ordered_json::parse(value_text, nullptr, false);
  const std::string section = key.substr(0, key.find('.'));
  const nlohmann::ordered_json& now = written.at(section).at(key.substr(section.size() + 1));
  if (!parsed.is_discarded() && (parsed.is_string() || !now.is_string())) {
    OCTET_FUZZ_CHECK(now == parsed, "--set ", last, " left ", key, " at ", now.dump());
  } else {
    OCTET_FUZZ_CHECK(now == nlohmann::ordered_json(value_text), "--set ", last, " left ", key,
                     " at ", now.dump());
  }
  return 0;
}

}  // namespace
}  // namespace octet::fuzz

OCTET_FUZZ_HARNESS(octet::fuzz::fuzz_input)
