// safetensors reading (validated against everything a corrupt or hand-made file can get wrong)
// and atomic writing (temporary file, fsync, rename).
#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "runtime/error.h"
#include "runtime/text_file.h"

namespace octet {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr size_t kLengthBytes = 8;  // the little-endian u64 header length

struct DTypeName {
  DType dtype;
  std::string_view name;
};

// F8_E8M0 is the name the safetensors format gives torch.float8_e8m0fnu (MXFP8 block scales).
constexpr DTypeName kNames[] = {
    {DType::kF32, "F32"},      {DType::kBF16, "BF16"},    {DType::kF16, "F16"},
    {DType::kE4M3, "F8_E4M3"}, {DType::kE5M2, "F8_E5M2"}, {DType::kE8M0, "F8_E8M0"},
    {DType::kI32, "I32"},      {DType::kI64, "I64"},      {DType::kU8, "U8"},
};

std::optional<DType> find_dtype(std::string_view name) {
  for (const auto& entry : kNames) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::string known_dtype_names() {
  std::string text;
  for (const auto& entry : kNames) {
    if (!text.empty()) text += ", ";
    text += entry.name;
  }
  return text;
}

std::string errno_text() { return std::strerror(errno); }

// Closes the descriptor on every path out of a function.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now so the caller can check the result (a deferred write error can surface here).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Removes the temporary file unless the write was committed by the rename.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::string path) : path_(std::move(path)) {}
  ~TemporaryFile() {
    if (!committed_) ::unlink(path_.c_str());
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::string& path() const { return path_; }
  void commit() { committed_ = true; }

 private:
  std::string path_;
  bool committed_ = false;
};

void write_all(int fd, const void* data, size_t n, const std::string& path, const char* what) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t written = ::write(fd, bytes, n);
    if (written < 0 && errno == EINTR) continue;
    OCTET_CHECK(written > 0, "cannot write safetensors file ", path, ": writing ", what,
                " failed: ", written < 0 ? errno_text() : std::string("no progress"));
    bytes += written;
    n -= static_cast<size_t>(written);
  }
}

// Reads exactly `n` bytes at `offset`; the caller has already checked they lie inside the file.
void read_all(int fd, void* data, size_t n, uint64_t offset, const std::string& path,
              const std::string& what) {
  auto* bytes = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t got = ::pread(fd, bytes, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    OCTET_CHECK(got > 0, "safetensors file ", path, ": reading ", what,
                " failed: ", got < 0 ? errno_text() : std::string("unexpected end of file"));
    bytes += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

std::string header_json(const NamedTensors& tensors, const SafetensorsMetadata& metadata,
                        const std::string& path) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    OCTET_CHECK(name != kMetadataKey, "cannot write safetensors file ", path, ": \"", kMetadataKey,
                "\" is reserved and cannot name a tensor");
    OCTET_CHECK(names.insert(name).second, "cannot write safetensors file ", path,
                ": duplicate tensor name \"", name, "\"");
    OCTET_CHECK(tensor.defined(), "cannot write safetensors file ", path, ": tensor \"", name,
                "\" is undefined");
    const uint64_t end = offset + tensor.nbytes();
    header[name] = Json{{"dtype", safetensors_dtype_name(tensor.dtype())},
                        {"shape", tensor.shape()},
                        {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {
    OCTET_FAIL("cannot write safetensors file ", path,
               ": a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  // Space padding to a multiple of 8 keeps the data 8-byte aligned; readers strip it as JSON
  // whitespace.
  text.append((kLengthBytes - text.size() % kLengthBytes) % kLengthBytes, ' ');
  return text;
}

// Durability of the rename itself; a failure here cannot lose data, so it is not an error.
void sync_parent_directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Duplicate keys are legal JSON that nlohmann folds into one entry, so they are caught while
// parsing: keys at depth 1 name tensors, keys at depth 2 are the fields of one entry.
struct DuplicateKeyFinder {
  std::set<std::string> top_keys;
  std::set<std::string> entry_keys;
  std::string current_top;
  std::string message;

  bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
    if (event != Json::parse_event_t::key || !message.empty()) return true;
    const std::string key = parsed.get<std::string>();
    if (depth == 1) {
      if (!top_keys.insert(key).second) message = "duplicate name \"" + key + "\" in the header";
      current_top = key;
      entry_keys.clear();
    } else if (depth == 2) {
      if (!entry_keys.insert(key).second) {
        message = "duplicate key \"" + key + "\" in header entry \"" + current_top + "\"";
      }
    }
    return true;
  }
};

// A non-negative JSON integer, or nullopt.
std::optional<int64_t> non_negative_integer(const Json& value) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(v);
    }
  } else if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return value.get<int64_t>();
  }
  return std::nullopt;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

Entry parse_entry(const std::string& path, const std::string& name, const Json& info) {
  const std::string where = "safetensors file " + path + ": tensor \"" + name + "\"";
  OCTET_CHECK(info.is_object(), where, ": header entry must be an object, got ", info.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    OCTET_CHECK(info.contains(field), where, ": header entry has no \"", field, "\"");
  }
  const Json& dtype = info["dtype"];
  OCTET_CHECK(dtype.is_string(), where, ": \"dtype\" must be a string, got ", dtype.dump());
  const std::optional<DType> parsed = find_dtype(dtype.get<std::string>());
  OCTET_CHECK(parsed.has_value(), where, ": unknown dtype ", dtype.dump(), "; expected one of ",
              known_dtype_names());

  const Json& shape_json = info["shape"];
  OCTET_CHECK(shape_json.is_array(), where, ": \"shape\" must be an array, got ",
              shape_json.dump());
  Shape shape;
  for (const Json& dim : shape_json) {
    const std::optional<int64_t> d = non_negative_integer(dim);
    OCTET_CHECK(d.has_value(), where, ": shape ", shape_json.dump(),
                " must hold non-negative integers");
    shape.push_back(*d);
  }

  const Json& offsets = info["data_offsets"];
  OCTET_CHECK(offsets.is_array() && offsets.size() == 2, where,
              ": \"data_offsets\" must be [begin, end], got ", offsets.dump());
  const std::optional<int64_t> begin = non_negative_integer(offsets[0]);
  const std::optional<int64_t> end = non_negative_integer(offsets[1]);
  OCTET_CHECK(begin && end && *begin <= *end, where, ": data_offsets ", offsets.dump(),
              " must be non-negative integers with begin <= end");

  // numel * element size, refusing any overflow on the way.
  uint64_t bytes = dtype_size(*parsed);
  for (int64_t d : shape) {
    const auto du = static_cast<uint64_t>(d);
    OCTET_CHECK(du == 0 || bytes <= std::numeric_limits<uint64_t>::max() / du, where, ": shape ",
                shape_str(shape), " is too large");
    bytes *= du;
  }
  const auto span = static_cast<uint64_t>(*end - *begin);
  OCTET_CHECK(bytes == span, where, ": shape ", shape_str(shape), " of ", dtype.get<std::string>(),
              " needs ", bytes, " bytes but data_offsets ", offsets.dump(), " hold ", span);
  return {name, *parsed, std::move(shape), static_cast<uint64_t>(*begin),
          static_cast<uint64_t>(*end)};
}

SafetensorsMetadata parse_metadata(const std::string& path, const Json& meta) {
  OCTET_CHECK(meta.is_object(), "safetensors file ", path, ": \"", kMetadataKey,
              "\" must be an object of strings, got ", meta.dump());
  SafetensorsMetadata out;
  for (const auto& [key, value] : meta.items()) {
    OCTET_CHECK(value.is_string(), "safetensors file ", path, ": metadata \"", key,
                "\" must be a string, got ", value.dump());
    out[key] = value.get<std::string>();
  }
  return out;
}

}  // namespace

bool SafetensorsFile::contains(std::string_view name) const {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const auto& entry) { return entry.first == name; });
}

const Tensor& SafetensorsFile::at(std::string_view name) const {
  for (const auto& [key, tensor] : tensors) {
    if (key == name) return tensor;
  }
  OCTET_FAIL("safetensors file ", path, " has no tensor \"", name, "\" (it holds ", tensors.size(),
             " tensors)");
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& entry : kNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  OCTET_FAIL("dtype ", dtype, " has no safetensors name");
}

DType dtype_from_safetensors_name(std::string_view name) {
  const std::optional<DType> dtype = find_dtype(name);
  OCTET_CHECK(dtype.has_value(), "unknown safetensors dtype \"", name, "\"; expected one of ",
              known_dtype_names());
  return *dtype;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata) {
  // Everything that can be checked is checked before the temporary file exists.
  const std::string header = header_json(tensors, metadata, path);

  TemporaryFile tmp(path + ".tmp." + std::to_string(::getpid()));
  FileDescriptor fd(::open(tmp.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  OCTET_CHECK(fd.get() >= 0, "cannot write safetensors file ", path, ": cannot create ", tmp.path(),
              ": ", errno_text());

  uint8_t length[kLengthBytes];
  const uint64_t n = header.size();
  for (size_t i = 0; i < kLengthBytes; ++i) length[i] = static_cast<uint8_t>(n >> (8 * i));
  write_all(fd.get(), length, sizeof(length), path, "the header length");
  write_all(fd.get(), header.data(), header.size(), path, "the header");
  for (const auto& [name, tensor] : tensors) {
    const Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
    write_all(fd.get(), host.data(), host.nbytes(), path, ("tensor \"" + name + "\"").c_str());
  }
  OCTET_CHECK(::fsync(fd.get()) == 0, "cannot write safetensors file ", path, ": fsync of ",
              tmp.path(), " failed: ", errno_text());
  OCTET_CHECK(fd.close() == 0, "cannot write safetensors file ", path, ": closing ", tmp.path(),
              " failed: ", errno_text());
  OCTET_CHECK(::rename(tmp.path().c_str(), path.c_str()) == 0, "cannot write safetensors file ",
              path, ": renaming ", tmp.path(), " into place failed: ", errno_text());
  tmp.commit();
  sync_parent_directory(path);
}

namespace {

// load_safetensors, whose every failure is an octet::Error already named by the caller.
SafetensorsFile read_safetensors(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  OCTET_CHECK(fd.get() >= 0, "cannot open safetensors file ", path, ": ", errno_text());
  struct stat st {};
  OCTET_CHECK(::fstat(fd.get(), &st) == 0, "safetensors file ", path,
              ": stat failed: ", errno_text());
  OCTET_CHECK(S_ISREG(st.st_mode), "safetensors file ", path, " is not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  OCTET_CHECK(file_size >= kLengthBytes, "safetensors file ", path, " is ", file_size,
              " bytes, shorter than its 8-byte header length");

  uint8_t length[kLengthBytes];
  read_all(fd.get(), length, sizeof(length), 0, path, "the header length");
  uint64_t header_size = 0;
  for (size_t i = 0; i < kLengthBytes; ++i)
    header_size |= static_cast<uint64_t>(length[i]) << (8 * i);
  OCTET_CHECK(header_size <= file_size - kLengthBytes, "safetensors file ", path,
              ": header length ", header_size, " runs past the end of the file (", file_size,
              " bytes)");

  std::string text(header_size, '\0');
  read_all(fd.get(), text.data(), text.size(), kLengthBytes, path, "the header");
  DuplicateKeyFinder duplicates;
  Json header;
  try {
    header = Json::parse(text, std::ref(duplicates));
  } catch (const Json::exception& e) {
    OCTET_FAIL("safetensors file ", path,
               ": header is not valid JSON: ", json_error_text(e.what()));
  }
  OCTET_CHECK(header.is_object(), "safetensors file ", path, ": header must be a JSON object, got ",
              header.type_name());
  OCTET_CHECK(duplicates.message.empty(), "safetensors file ", path, ": ", duplicates.message);

  SafetensorsFile file;
  file.path = path;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      file.metadata = parse_metadata(path, info);
    } else {
      entries.push_back(parse_entry(path, name, info));
    }
  }

  // The reference implementation requires the tensors to tile the data section exactly: no
  // overlap, no gap, nothing after the last one.
  const uint64_t data_start = kLengthBytes + header_size;
  const uint64_t data_size = file_size - data_start;
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    OCTET_CHECK(e.end <= data_size, "safetensors file ", path, ": tensor \"", e.name,
                "\" data_offsets [", e.begin, ", ", e.end, "] run past the end of the data (",
                data_size, " bytes): the file is truncated or the offsets are wrong");
    OCTET_CHECK(e.begin >= expected, "safetensors file ", path, ": tensor \"", e.name,
                "\" data_offsets [", e.begin, ", ", e.end, "] overlap tensor \"",
                previous ? previous->name : "", "\" [", previous ? previous->begin : 0, ", ",
                expected, "]");
    OCTET_CHECK(e.begin == expected, "safetensors file ", path, ": gap of ", e.begin - expected,
                " bytes before tensor \"", e.name, "\" (data_offsets [", e.begin, ", ", e.end,
                "])");
    expected = e.end;
    previous = &e;
  }
  OCTET_CHECK(expected == data_size, "safetensors file ", path, ": ", data_size - expected,
              " bytes after the last tensor's data (the tensors cover ", expected, " of ",
              data_size, " data bytes)");

  file.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    read_all(fd.get(), t.data(), t.nbytes(), data_start + e.begin, path,
             "tensor \"" + e.name + "\"");
    file.tensors.emplace_back(e.name, std::move(t));
  }
  return file;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  // Anything else (std::bad_alloc from a huge tensor the header declares) still names the file.
  return with_error_context("safetensors file " + path, [&] { return read_safetensors(path); });
}

}  // namespace octet
