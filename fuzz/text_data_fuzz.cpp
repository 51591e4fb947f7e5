// A text file of any bytes as training data (`data.kind=text`): a dataset, or an octet::Error
// naming the file. A dataset's train and validation tokens are the file's bytes in order, split
// on a character boundary, and encode/decode gives the text back.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/token_data.h"
#include "fuzz/fuzz_support.h"

namespace octet::fuzz {
namespace {

int fuzz_input(const std::string& text) {
  static const std::string path = scratch_path("input.txt");
  write_file(path, text);

  data::DataOptions options;
  options.kind = data::DataKind::kText;
  options.path = path;
  options.val_fraction = 0.1;
  std::unique_ptr<data::Dataset> dataset;
  if (!parses(path, [&] { dataset = data::open_dataset(options); })) return 0;
  const auto& stream = dynamic_cast<const data::TokenStreamDataset&>(*dataset);

  std::string tokens;
  for (data::Split split : {data::Split::kTrain, data::Split::kValidation}) {
    OCTET_FUZZ_CHECK(!stream.segments(split).empty());
    for (const data::Segment& s : stream.segments(split)) {
      for (int64_t i = 0; i < s.size; ++i) tokens.push_back(static_cast<char>(s.tokens[i]));
    }
  }
  OCTET_FUZZ_CHECK(tokens == text, "the splits do not hold the file's bytes in order");
  const data::Segment& validation = stream.segments(data::Split::kValidation).front();
  OCTET_FUZZ_CHECK(validation.size >= 2 && stream.tokens_in(data::Split::kTrain) >= 2);
  // A character boundary, unless the clamp to two bytes of validation moved it into a character.
  if (validation.size > 2) {
    OCTET_FUZZ_CHECK((validation.tokens[0] & 0xC0) != 0x80, "validation starts mid-character");
  }
  const std::vector<int32_t> ids = dataset->encode(text);
  OCTET_FUZZ_CHECK(dataset->decode(ids) == text, "encode then decode changed the text");
  return 0;
}

}  // namespace
}  // namespace octet::fuzz

OCTET_FUZZ_HARNESS(octet::fuzz::fuzz_input)
