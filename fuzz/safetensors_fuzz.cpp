// load_safetensors on any bytes: a file that loads, or an octet::Error naming it. A file that
// loads saves back with the same tensor data (the reader makes the tensors tile the data section,
// so the data bytes are the same bytes), and what octet saved loads and saves back byte for byte.
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.h"
#include "runtime/safetensors.h"

namespace octet::fuzz {
namespace {

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return n;
}

std::string data_section(const std::string& bytes) {
  return bytes.substr(static_cast<size_t>(8 + header_length(bytes)));
}

void check_same(const SafetensorsFile& a, const SafetensorsFile& b) {
  OCTET_FUZZ_CHECK(a.metadata == b.metadata, "metadata changed by a save and load");
  OCTET_FUZZ_CHECK(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    OCTET_FUZZ_CHECK(a.tensors[i].first == b.tensors[i].first, "tensor ", i, " is \"",
                     a.tensors[i].first, "\" then \"", b.tensors[i].first, "\"");
    OCTET_FUZZ_CHECK(same_tensor(a.tensors[i].second, b.tensors[i].second), "tensor \"",
                     a.tensors[i].first, "\" changed by a save and load");
  }
}

int fuzz_input(const std::string& bytes) {
  static const std::string input = scratch_path("input.safetensors");
  static const std::string copy = scratch_path("copy.safetensors");
  static const std::string again = scratch_path("again.safetensors");
  write_file(input, bytes);

  SafetensorsFile file;
  if (!parses(input, [&] { file = load_safetensors(input); })) return 0;

  // Whatever loaded can be saved: names and metadata came through a JSON parser, so they are
  // UTF-8, and the reader refused duplicates and the reserved name.
  if (!parses("", [&] { save_safetensors(copy, file.tensors, file.metadata); })) {
    fail("a file that loaded cannot be saved back");
  }
  const std::string saved = read_file(copy);
  OCTET_FUZZ_CHECK(data_section(saved) == data_section(bytes),
                   "the saved data section differs from the loaded file's");
  SafetensorsFile reloaded;
  if (!parses("", [&] { reloaded = load_safetensors(copy); })) fail("a saved file does not load");
  check_same(file, reloaded);
  save_safetensors(again, reloaded.tensors, reloaded.metadata);
  OCTET_FUZZ_CHECK(read_file(again) == saved,
                   "a file octet saved does not save back byte for byte");
  return 0;
}

}  // namespace
}  // namespace octet::fuzz

OCTET_FUZZ_HARNESS(octet::fuzz::fuzz_input)
