// The round trip both config harnesses check: a config that loaded writes every key, reads back
// equal, and writes the same JSON again.
#pragma once

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "tools/config.h"

namespace octet::fuzz {

inline nlohmann::ordered_json check_config_round_trip(const config::RunConfig& c) {
  const nlohmann::ordered_json written = config::to_json(c);
  config::RunConfig back;
  if (!parses("", [&] { back = config::from_json(written); })) {
    fail("the JSON of a config that loaded does not load: " + written.dump());
  }
  OCTET_FUZZ_CHECK(back == c, "the config read back differs: ", written.dump());
  OCTET_FUZZ_CHECK(config::to_json(back) == written,
                   "the config writes differently the second time");
  return written;
}

}  // namespace octet::fuzz
