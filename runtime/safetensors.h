// safetensors files (the Hugging Face checkpoint format) read and written bit-exactly, with an
// atomic write so a crash mid-save keeps the previous file.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace octet {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using SafetensorsMetadata = std::map<std::string, std::string>;

// What a file holds: CPU tensors in the order of their data in the file (for files octet wrote,
// the order they were saved in) and the "__metadata__" string map.
struct SafetensorsFile {
  std::string path;
  NamedTensors tensors;
  SafetensorsMetadata metadata;

  bool contains(std::string_view name) const;
  // Throws, naming the file and the missing tensor.
  const Tensor& at(std::string_view name) const;
};

// The safetensors spelling of a dtype: F32, BF16, F16, F8_E4M3, F8_E5M2, F8_E8M0, I32, I64, U8.
std::string_view safetensors_dtype_name(DType dtype);
// The inverse; throws naming the unknown name and the known ones.
DType dtype_from_safetensors_name(std::string_view name);

// Writes `tensors` (any device; copied to the host one at a time) and `metadata` to
// `path + ".tmp.<pid>"`, fsyncs it, and renames it over `path`. On any failure the temporary file
// is removed, whatever was at `path` is left untouched, and an octet::Error names the cause.
// The header is compact JSON with "__metadata__" first (omitted when empty), then the tensors in
// the given order with tightly packed data, padded with spaces to a multiple of 8 bytes as the
// reference implementation does.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata = {});

// Reads and validates a whole file. Every malformed input (short file, bad header length, bad
// JSON, unknown dtype, shape/offset mismatch, overlapping, gapped or out-of-range offsets,
// truncated data, duplicate names, non-string metadata) is an octet::Error naming the file.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace octet
