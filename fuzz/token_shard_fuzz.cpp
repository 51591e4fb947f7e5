// An llm.c token shard of any bytes (`data.kind=shards`): opened, or an octet::Error naming the
// file. A shard that opens writes back to the same bytes (the header's unused ints aside), and
// as a dataset its first batch is its first tokens and its vocabulary its largest token + 1.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/token_data.h"
#include "fuzz/fuzz_support.h"

namespace octet::fuzz {
namespace {

int fuzz_input(const std::string& bytes) {
  static const std::string path = scratch_path("input.bin");
  static const std::string copy = scratch_path("copy.bin");
  write_file(path, bytes);

  std::shared_ptr<const data::TokenShard> shard;
  if (!parses(path, [&] { shard = data::TokenShard::open(path); })) return 0;
  const std::vector<uint16_t> tokens(shard->tokens(), shard->tokens() + shard->size());
  shard.reset();

  data::write_token_shard(copy, tokens);
  const std::string written = read_file(copy);
  const size_t header = static_cast<size_t>(data::kShardHeaderBytes);
  OCTET_FUZZ_CHECK(written.size() == bytes.size(), "a shard of ", bytes.size(),
                   " bytes writes back as ", written.size());
  OCTET_FUZZ_CHECK(written.compare(0, 12, bytes, 0, 12) == 0, "magic, version or count changed");
  OCTET_FUZZ_CHECK(written.compare(header, std::string::npos, bytes, header) == 0,
                   "the tokens changed");

  std::unique_ptr<data::ShardDataset> dataset;
  if (!parses(path, [&] { dataset = std::make_unique<data::ShardDataset>(path, "", 0.1); })) {
    OCTET_FUZZ_CHECK(tokens.size() < 4, "a shard of ", tokens.size(), " tokens is refused");
    return 0;
  }
  OCTET_FUZZ_CHECK(dataset->vocab_size() == *std::max_element(tokens.begin(), tokens.end()) + 1);
  const data::Batch batch = dataset->next_batch(data::Split::kTrain, 1, 1);
  OCTET_FUZZ_CHECK(batch.inputs.data_as<int32_t>()[0] == tokens[0] &&
                   batch.targets.data_as<int32_t>()[0] == tokens[1]);
  return 0;
}

}  // namespace
}  // namespace octet::fuzz

OCTET_FUZZ_HARNESS(octet::fuzz::fuzz_input)
