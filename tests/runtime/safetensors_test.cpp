// safetensors files: bit-exact round trips of every dtype, the exact bytes other readers expect,
// one clear error per kind of corruption, and an atomic write that keeps the old file.
#include "runtime/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/rng.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

using test::error_of;

using test::ScratchDir;

std::string read_bytes(const std::string& path) { return test::read_file_bytes(path); }
void write_bytes(const std::string& path, const std::string& bytes) {
  test::write_file_bytes(path, bytes);
}

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out;
}

// A file with this exact header text and data section (no padding added).
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  write_bytes(path, le64(header.size()) + header + data);
}

// Random bytes, so every bit pattern of a dtype (NaNs, subnormals, negatives) is exercised.
Tensor random_bytes(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  Generator gen(seed);
  auto* bytes = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(gen.next_u32());
  return t;
}

// An empty tensor may have no buffer: memcmp on a null pointer is undefined even for 0 bytes.
bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.nbytes() != b.nbytes()) return false;
  return a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

TEST(Safetensors, DTypeNames) {
  const std::pair<DType, const char*> expected[] = {
      {DType::kF32, "F32"},      {DType::kBF16, "BF16"},    {DType::kF16, "F16"},
      {DType::kE4M3, "F8_E4M3"}, {DType::kE5M2, "F8_E5M2"}, {DType::kE8M0, "F8_E8M0"},
      {DType::kI32, "I32"},      {DType::kI64, "I64"},      {DType::kU8, "U8"}};
  for (const auto& [dtype, name] : expected) {
    EXPECT_EQ(safetensors_dtype_name(dtype), name);
    EXPECT_EQ(dtype_from_safetensors_name(name), dtype);
  }
  EXPECT_THAT(error_of([] { dtype_from_safetensors_name("F64"); }),
              AllOf(HasSubstr("unknown safetensors dtype \"F64\""), HasSubstr("F8_E8M0")));
}

TEST(Safetensors, RoundTripsEveryDTypeBitExactly) {
  ScratchDir dir;
  NamedTensors tensors;
  uint64_t seed = 1;
  for (DType dtype : kAllDTypes) {
    const std::string name(dtype_name(dtype));
    tensors.emplace_back(name + ".matrix", random_bytes({3, 5}, dtype, seed++));
    tensors.emplace_back(name + ".scalar", random_bytes({}, dtype, seed++));
    tensors.emplace_back(name + ".empty", random_bytes({0, 4}, dtype, seed++));
    tensors.emplace_back(name + ".cube", random_bytes({2, 3, 7}, dtype, seed++));
  }
  // Names that sort differently from the save order, so order preservation is visible.
  tensors.emplace_back("a.first.by.name", random_bytes({4}, DType::kF32, seed++));
  const SafetensorsMetadata metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "ünïcode"}};
  const std::string path = dir.file("all.safetensors");
  save_safetensors(path, tensors, metadata);

  const SafetensorsFile file = load_safetensors(path);
  EXPECT_EQ(file.path, path);
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(file.tensors[i].first, tensors[i].first) << "tensor " << i;
    EXPECT_TRUE(same_bytes(file.tensors[i].second, tensors[i].second)) << tensors[i].first;
    EXPECT_TRUE(file.tensors[i].second.device().is_cpu());
  }
  EXPECT_TRUE(file.contains("e4m3.cube"));
  EXPECT_FALSE(file.contains("e4m3.missing"));
  EXPECT_TRUE(same_bytes(file.at("u8.matrix"), tensors[32].second));
  EXPECT_THAT(error_of([&] { file.at("nope"); }),
              AllOf(HasSubstr(path), HasSubstr("has no tensor \"nope\"")));
}

TEST(Safetensors, EmptyFileHasNoMetadataKey) {
  ScratchDir dir;
  const std::string path = dir.file("empty.safetensors");
  save_safetensors(path, {});
  // "{}" padded to 8 bytes.
  EXPECT_EQ(read_bytes(path), le64(8) + "{}      ");
  const SafetensorsFile file = load_safetensors(path);
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_TRUE(file.metadata.empty());
}

// The bytes of a small file, written out by hand from the format description.
TEST(Safetensors, ExactByteLayout) {
  ScratchDir dir;
  const std::string path = dir.file("small.safetensors");
  const float w[] = {1.0f, -2.0f};
  const uint8_t b[] = {7, 8, 9};
  save_safetensors(path,
                   {{"w", Tensor::from_bytes(w, {2}, DType::kF32)},
                    {"b", Tensor::from_bytes(b, {1, 3}, DType::kU8)}},
                   {{"format", "pt"}});
  // The JSON is 140 characters; 4 spaces pad it to 144 (0x90), a multiple of 8.
  const std::string json = R"({"__metadata__":{"format":"pt"},)"
                           R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"U8","shape":[1,3],"data_offsets":[8,11]}})";
  ASSERT_EQ(json.size(), 140u);
  const std::string expected = std::string("\x90\0\0\0\0\0\0\0", 8) + json + "    " +
                               std::string("\x00\x00\x80\x3f", 4) +  // 1.0f, little-endian
                               std::string("\x00\x00\x00\xc0", 4) +  // -2.0f
                               std::string("\x07\x08\x09", 3);
  EXPECT_EQ(read_bytes(path), expected);
}

// What another reader sees: a u64 length, a space-padded JSON object whose data_offsets tile the
// data section in header order.
TEST(Safetensors, HeaderIsPaddedJsonThatTilesTheData) {
  ScratchDir dir;
  for (size_t note_length = 0; note_length < 9; ++note_length) {
    const std::string path = dir.file("pad.safetensors");
    const NamedTensors tensors = {{"z.weight", random_bytes({3, 3}, DType::kBF16, 1)},
                                  {"a.bias", random_bytes({5}, DType::kE5M2, 2)},
                                  {"m.scale", random_bytes({2}, DType::kI64, 3)}};
    save_safetensors(path, tensors, {{"note", std::string(note_length, 'x')}});
    const std::string bytes = read_bytes(path);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i)
      n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    EXPECT_EQ(n % 8, 0u) << "note length " << note_length;
    const std::string header = bytes.substr(8, n);
    const size_t last_brace = header.rfind('}');
    EXPECT_EQ(header.find_first_not_of(' ', last_brace + 1), std::string::npos);
    EXPECT_LT(header.size() - last_brace - 1, 8u);

    const auto json = nlohmann::ordered_json::parse(header);
    std::vector<std::string> keys;
    for (const auto& [key, value] : json.items()) keys.push_back(key);
    EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "z.weight", "a.bias", "m.scale"}));
    EXPECT_EQ(json["__metadata__"]["note"], std::string(note_length, 'x'));
    EXPECT_EQ(json["z.weight"]["dtype"], "BF16");
    EXPECT_EQ(json["z.weight"]["shape"], nlohmann::ordered_json({3, 3}));
    EXPECT_EQ(json["z.weight"]["data_offsets"], nlohmann::ordered_json({0, 18}));
    EXPECT_EQ(json["a.bias"]["dtype"], "F8_E5M2");
    EXPECT_EQ(json["a.bias"]["data_offsets"], nlohmann::ordered_json({18, 23}));
    EXPECT_EQ(json["m.scale"]["data_offsets"], nlohmann::ordered_json({23, 39}));
    EXPECT_EQ(bytes.size(), 8 + n + 39);
    EXPECT_EQ(0, std::memcmp(bytes.data() + 8 + n + 18, tensors[1].second.data(), 5));
  }
}

TEST(Safetensors, ViewsAreSavedWithTheirOwnBytes) {
  ScratchDir dir;
  const std::string path = dir.file("view.safetensors");
  const Tensor base = random_bytes({6, 4}, DType::kF32, 9);
  const Tensor rows = base.slice(2, 5);  // a view at a storage offset
  save_safetensors(path, {{"rows", rows}});
  const SafetensorsFile file = load_safetensors(path);
  EXPECT_TRUE(same_bytes(file.at("rows"), rows));
  EXPECT_EQ(file.at("rows").shape(), (Shape{3, 4}));
}

TEST(Safetensors, SavesDeviceTensorsThroughTheHost) {
  OCTET_REQUIRE_CUDA();
  ScratchDir dir;
  const std::string path = dir.file("cuda.safetensors");
  const Tensor host = random_bytes({5, 3}, DType::kBF16, 4);
  save_safetensors(path, {{"g", host.to(Device::cuda(0))}});
  EXPECT_TRUE(same_bytes(load_safetensors(path).at("g"), host));
}

TEST(Safetensors, SaveRejectsBadInput) {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");
  const Tensor t = random_bytes({2}, DType::kF32, 1);
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"x", t}, {"x", t}});
              }),
              AllOf(HasSubstr(path), HasSubstr("duplicate tensor name \"x\"")));
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"__metadata__", t}});
              }),
              HasSubstr("\"__metadata__\" is reserved"));
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"u", Tensor()}});
              }),
              HasSubstr("tensor \"u\" is undefined"));
  EXPECT_THAT(error_of([&] {
                save_safetensors(path, {{"\xff\xfe", t}});
              }),
              HasSubstr("not valid UTF-8"));
  EXPECT_TRUE(files_in(dir.path()).empty()) << "a rejected save must leave no file behind";
}

// ---- corrupt files: each gets a message that names the file and what is wrong ----

struct Corrupt {
  ScratchDir dir;
  std::string path = dir.file("corrupt.safetensors");
  std::string load_error() {
    return error_of([&] { load_safetensors(path); });
  }
  // Writes `header` and `data` as the file and returns what loading it throws.
  std::string error_for(const std::string& header, const std::string& data) {
    write_raw(path, header, data);
    return load_error();
  }
  // A message that names the file and says `what`.
  ::testing::Matcher<const std::string&> says(const std::string& what) const {
    return AllOf(HasSubstr(path), HasSubstr(what));
  }
};

TEST(SafetensorsCorrupt, MissingFile) {
  Corrupt c;
  EXPECT_THAT(c.load_error(), AllOf(HasSubstr("cannot open safetensors file " + c.path),
                                    HasSubstr("No such file or directory")));
}

TEST(SafetensorsCorrupt, ShorterThanTheLengthField) {
  Corrupt c;
  write_bytes(c.path, std::string("\x10\0\0\0\0", 5));
  EXPECT_THAT(c.load_error(), c.says("is 5 bytes, shorter than its 8-byte header"));
}

TEST(SafetensorsCorrupt, HeaderLengthPastTheEnd) {
  Corrupt c;
  write_bytes(c.path, le64(1000) + "{}");
  EXPECT_THAT(c.load_error(), c.says("header length 1000 runs past "
                                     "the end of the file (10 bytes)"));
  // A huge length must not wrap around in the check.
  write_bytes(c.path, le64(~uint64_t{0}) + "{}");
  EXPECT_THAT(c.load_error(), HasSubstr("runs past the end of the file"));
}

TEST(SafetensorsCorrupt, HeaderNotJson) {
  Corrupt c;
  EXPECT_THAT(c.error_for(R"({"w": {"dtype": "F32",)", ""), c.says("header is not valid JSON"));
  write_raw(c.path, "[1, 2]", "");
  EXPECT_THAT(c.load_error(), HasSubstr("header must be a JSON object, got array"));
}

TEST(SafetensorsCorrupt, UnknownDType) {
  Corrupt c;
  EXPECT_THAT(
      c.error_for(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                  std::string(8, '\0')),
      AllOf(c.says("tensor \"w\": unknown dtype \"F64\""), HasSubstr("expected one of F32, BF16")));
}

TEST(SafetensorsCorrupt, ShapeDoesNotMatchOffsets) {
  Corrupt c;
  EXPECT_THAT(c.error_for(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
                          std::string(20, '\0')),
              c.says("tensor \"w\": shape (2, 3) of F32 needs 24 "
                     "bytes but data_offsets [0,20] hold 20"));
}

TEST(SafetensorsCorrupt, MalformedEntries) {
  Corrupt c;
  const std::string data(4, '\0');
  const std::pair<std::string, std::string> cases[] = {
      {R"({"w":[1]})", "header entry must be an object"},
      {R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "header entry has no \"dtype\""},
      {R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "header entry has no \"shape\""},
      {R"({"w":{"dtype":"F32","shape":[1]}})", "header entry has no \"data_offsets\""},
      {R"({"w":{"dtype":1,"shape":[1],"data_offsets":[0,4]}})", "\"dtype\" must be a string"},
      {R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", "\"shape\" must be an array"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
       "must hold non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
       "must hold non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "must be [begin, end]"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "with begin <= end"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})",
       "is too large"},
  };
  for (const auto& [header, message] : cases) {
    write_raw(c.path, header, data);
    EXPECT_THAT(c.load_error(),
                AllOf(HasSubstr(c.path), HasSubstr("tensor \"w\""), HasSubstr(message)))
        << header;
  }
}

TEST(SafetensorsCorrupt, OverlappingOffsets) {
  Corrupt c;
  EXPECT_THAT(c.error_for(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                          std::string(6, '\0')),
              c.says("tensor \"b\" data_offsets [2, 6] overlap tensor \"a\" [0, 4]"));
}

TEST(SafetensorsCorrupt, GapBetweenTensors) {
  Corrupt c;
  EXPECT_THAT(c.error_for(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                          R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                          std::string(6, '\0')),
              c.says("gap of 2 bytes before tensor \"b\""));
}

TEST(SafetensorsCorrupt, OffsetsPastTheData) {
  Corrupt c;
  EXPECT_THAT(c.error_for(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})",
                          std::string(10, '\0')),
              c.says("tensor \"a\" data_offsets [0, 16] run past the "
                     "end of the data (10 bytes)"));
}

TEST(SafetensorsCorrupt, TruncatedFile) {
  Corrupt c;
  save_safetensors(c.path, {{"w", random_bytes({64}, DType::kF32, 3)}});
  std::string bytes = read_bytes(c.path);
  bytes.resize(bytes.size() - 5);
  write_bytes(c.path, bytes);
  EXPECT_THAT(c.load_error(), c.says("run past the end of the data "
                                     "(251 bytes): the file is "
                                     "truncated"));
}

TEST(SafetensorsCorrupt, TrailingBytes) {
  Corrupt c;
  save_safetensors(c.path, {{"w", random_bytes({4}, DType::kU8, 3)}});
  write_bytes(c.path, read_bytes(c.path) + "xyz");
  EXPECT_THAT(c.load_error(), c.says("3 bytes after the last tensor's data"));
}

TEST(SafetensorsCorrupt, DuplicateNames) {
  Corrupt c;
  EXPECT_THAT(c.error_for(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                          R"("a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                          std::string(4, '\0')),
              c.says("duplicate name \"a\" in the header"));
  write_raw(c.path, R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"shape":[2]}})",
            std::string(2, '\0'));
  EXPECT_THAT(c.load_error(), HasSubstr("duplicate key \"shape\" in header entry \"a\""));
}

TEST(SafetensorsCorrupt, NonStringMetadata) {
  Corrupt c;
  EXPECT_THAT(c.error_for(R"({"__metadata__":{"step":12}})", ""),
              c.says("metadata \"step\" must be a string, got 12"));
  write_raw(c.path, R"({"__metadata__":"x"})", "");
  EXPECT_THAT(c.load_error(), HasSubstr("\"__metadata__\" must be an object of strings"));
}

TEST(SafetensorsCorrupt, NotARegularFile) {
  Corrupt c;
  EXPECT_THAT(error_of([&] { load_safetensors(c.dir.path().string()); }),
              HasSubstr("is not a regular file"));
}

// ---- the atomic write ----

const NamedTensors& old_tensors() {
  static const NamedTensors tensors = {{"w", random_bytes({8}, DType::kF32, 11)}};
  return tensors;
}

void expect_old_file_intact(const ScratchDir& dir, const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_TRUE(same_bytes(file.at("w"), old_tensors()[0].second));
  EXPECT_EQ(file.metadata.at("version"), "old");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"ckpt.safetensors"})
      << "the temporary file must be removed";
}

TEST(SafetensorsAtomic, OverwriteReplacesTheFileAndLeavesNoTemporary) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  save_safetensors(path, old_tensors(), {{"version", "old"}});
  save_safetensors(path, {{"v", random_bytes({3}, DType::kI32, 5)}}, {{"version", "new"}});
  const SafetensorsFile file = load_safetensors(path);
  EXPECT_EQ(file.metadata.at("version"), "new");
  EXPECT_TRUE(file.contains("v"));
  EXPECT_FALSE(file.contains("w"));
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"ckpt.safetensors"});
}

TEST(SafetensorsAtomic, MissingDirectoryIsAnError) {
  ScratchDir dir;
  const std::string path = dir.file("no/such/dir/ckpt.safetensors");
  EXPECT_THAT(error_of([&] { save_safetensors(path, old_tensors()); }),
              AllOf(HasSubstr("cannot write safetensors file " + path), HasSubstr("cannot create"),
                    HasSubstr("No such file or directory")));
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(SafetensorsAtomic, ReadOnlyDirectoryKeepsTheOldFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "skipped: root ignores directory permissions";
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  save_safetensors(path, old_tensors(), {{"version", "old"}});
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  const std::string message = error_of([&] {
    save_safetensors(path, {{"v", random_bytes({3}, DType::kI32, 5)}}, {{"version", "new"}});
  });
  fs::permissions(dir.path(), fs::perms::owner_all);
  EXPECT_THAT(message, AllOf(HasSubstr(path), HasSubstr("Permission denied")));
  expect_old_file_intact(dir, path);
}

// rename() onto a directory fails after the data was written: the temporary must go.
TEST(SafetensorsAtomic, FailedRenameRemovesTheTemporary) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  fs::create_directory(path);
  fs::create_directory(dir.file("ckpt.safetensors/inside"));  // rename cannot replace it
  EXPECT_THAT(error_of([&] { save_safetensors(path, old_tensors()); }),
              AllOf(HasSubstr(path), HasSubstr("renaming"), HasSubstr("into place failed")));
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"ckpt.safetensors"});
  EXPECT_TRUE(fs::is_directory(dir.file("ckpt.safetensors/inside")));
}

// A write that fails half way (the file-size limit, as a full disk would) keeps the old file.
TEST(SafetensorsAtomic, WriteFailingMidwayKeepsTheOldFile) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  save_safetensors(path, old_tensors(), {{"version", "old"}});

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &previous), 0);  // write() returns EFBIG instead
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string message = error_of([&] {
    save_safetensors(path, {{"big", random_bytes({4096}, DType::kF32, 5)}}, {{"version", "new"}});
  });
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &previous, nullptr);

  EXPECT_THAT(message, AllOf(HasSubstr("cannot write safetensors file " + path),
                             HasSubstr("writing tensor \"big\" failed: File too large")));
  expect_old_file_intact(dir, path);
}

}  // namespace
}  // namespace octet
