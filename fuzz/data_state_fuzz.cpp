// data::decode_state on any string (a checkpoint's "data_state"): a state, or an octet::Error
// naming the data state. A state that decodes encodes to the same JSON value and decodes back
// equal; set on a dataset, it is taken or refused with an octet::Error.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "data/dataset.h"
#include "data/token_data.h"
#include "fuzz/fuzz_support.h"

namespace {

// Two shards of 40 and 9 tokens: cursors of segment 0 and 1 fit, others do not.
std::unique_ptr<octet::data::Dataset> make_dataset() {
  using namespace octet;
  const std::string a = fuzz::scratch_path("a.bin"), b = fuzz::scratch_path("b.bin");
  data::write_token_shard(a, std::vector<uint16_t>(40, 7));
  data::write_token_shard(b, std::vector<uint16_t>(9, 3));
  return std::make_unique<data::ShardDataset>(a, b, 0.1);
}

}  // namespace

namespace octet::fuzz {
namespace {

int fuzz_input(const std::string& text) {
  static const std::unique_ptr<data::Dataset> dataset = make_dataset();

  data::DataState state;
  if (!parses("data state", [&] { state = data::decode_state(text); })) return 0;

  const std::string encoded = data::encode_state(state);
  OCTET_FUZZ_CHECK(nlohmann::json::parse(encoded) == nlohmann::json::parse(text), "\"", text,
                   "\" encodes as ", encoded);
  data::DataState back;
  if (!parses("", [&] { back = data::decode_state(encoded); })) fail(encoded + " does not decode");
  OCTET_FUZZ_CHECK(back == state, encoded, " decodes to another state");

  const data::DataState before = dataset->state();
  if (!parses("data state", [&] { dataset->set_state(state); })) {
    OCTET_FUZZ_CHECK(dataset->state() == before, "a refused state changed the dataset's cursors");
    return 0;
  }
  OCTET_FUZZ_CHECK(dataset->state() == state);
  // Taken: a batch can be cut from there (the cursor moves on to a segment that holds one).
  for (data::Split split : {data::Split::kTrain, data::Split::kValidation}) {
    if (!parses("", [&] { dataset->next_batch(split, 2, 4); })) {
      fail("no batch from the accepted state " + encoded);
    }
  }
  dataset->set_state(before);
  return 0;
}

}  // namespace
}  // namespace octet::fuzz

OCTET_FUZZ_HARNESS(octet::fuzz::fuzz_input)
