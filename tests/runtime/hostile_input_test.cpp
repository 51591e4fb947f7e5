// The runtime's parsers under hostile input: hostile safetensors files and recipes end as
// octet::Error naming the file (and the key or offset), never as another exception.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/recipe.h"
#include "runtime/rng.h"
#include "runtime/safetensors.h"
#include "runtime/text_file.h"
#include "tests/support/only_octet_errors.h"
#include "tests/support/scratch_dir.h"

namespace octet {
namespace {

using ::testing::HasSubstr;

template <typename Fn>
void only_octet_errors(const std::string& input, const std::string& names, Fn fn) {
  test::only_octet_errors(input, names, fn, test::OneLine::kNo);
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return s;
}

TEST(HostileSafetensors, AbsurdHeaders) {
  test::ScratchDir dir;
  const std::string path = dir.file("h.safetensors");
  const std::vector<std::string> headers = {
      R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})",
      R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
      R"({"w":{"dtype":"F32","shape":[1e30],"data_offsets":[0,4]}})",
      R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,1e999]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551615,3]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})",
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"__metadata__":[]})",
      R"({"__metadata__":{"a":"\ud800"}})",
      "{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
      std::string(20000, '['),
      R"({"w":{"dtype":"F32","shape":[65536,65536,65536,65536],"data_offsets":[0,4]}})",
      R"({"w":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"w":{}})"};
  for (const std::string& h : headers) {
    test::write_file_bytes(path, le64(h.size()) + h + std::string(4, '\0'));
    only_octet_errors(h.substr(0, 60), path, [&] { load_safetensors(path); });
  }
}

TEST(HostileSafetensors, RandomMutationsOfAGoodFile) {
  test::ScratchDir dir;
  const std::string good_path = dir.file("good.safetensors");
  Tensor a = Tensor::zeros({3, 5}, DType::kF32), b = Tensor::zeros({7}, DType::kE4M3);
  save_safetensors(good_path,
                   {{"a", a}, {"b.scale_inv", b}, {"e", Tensor::zeros({0}, DType::kI64)}},
                   {{"note", "hello"}});
  const std::string good = test::read_file_bytes(good_path);
  const std::string path = dir.file("m.safetensors");
  Generator gen(21);
  for (int i = 0; i < 1000; ++i) {
    std::string bytes = good;
    const uint32_t kind = gen.next_u32() % 4;
    if (kind == 0) {
      bytes[gen.next_u32() % bytes.size()] = static_cast<char>(gen.next_u32());
    } else if (kind == 1) {
      bytes[gen.next_u32() % 8] = static_cast<char>(gen.next_u32());  // the header length
    } else if (kind == 2) {
      bytes.resize(gen.next_u32() % bytes.size());
    } else {
      bytes.insert(gen.next_u32() % bytes.size(), 1, static_cast<char>(gen.next_u32()));
    }
    test::write_file_bytes(path, bytes);
    only_octet_errors("mutation " + std::to_string(i), path, [&] { load_safetensors(path); });
  }
}

TEST(HostileRecipes, TextAndFiles) {
  test::ScratchDir dir;
  const std::string path = dir.file("r.json");
  const std::vector<std::string> texts = {
      "",
      "{",
      "[]",
      "null",
      "1e999",
      R"({"recipe": "delayed", "margin": 1e999})",
      R"({"recipe": "delayed", "margin": -1e999})",
      R"({"recipe": "delayed", "amax_history_len": 18446744073709551616})",
      R"({"recipe": "delayed", "amax_history_len": 1.5})",
      R"({"recipe": "current", "amax_epsilon": -0.0})",
      R"({"recipe": "current", "amax_epsilon": 1e400})",
      "{\"recipe\": \"\xff\"}",
      R"({"recipe": ["delayed"]})",
      R"({"recipe": "delayed", "recipe": "current"})",
      std::string(30000, '{'),
      std::string("{\"recipe\": \"delayed\"}\0", 22)};
  for (const std::string& t : texts) {
    only_octet_errors(t.substr(0, 60), "where", [&] { parse_recipe(t, "where"); });
    test::write_file_bytes(path, t);
    only_octet_errors(t.substr(0, 60), path, [&] { load_recipe(path); });
  }
  only_octet_errors("a directory", dir.path().string() + " is a directory",
                    [&] { load_recipe(dir.path().string()); });
  only_octet_errors("missing", "missing.json", [&] { load_recipe(dir.file("missing.json")); });
}

TEST(TextFile, Utf8CheckAndPrintable) {
  EXPECT_EQ(first_invalid_utf8("abc"), -1);
  EXPECT_EQ(first_invalid_utf8("caf\xc3\xa9"), -1);
  EXPECT_EQ(first_invalid_utf8("caf\xe9"), 3);
  EXPECT_EQ(first_invalid_utf8("\xed\xa0\x80"), 0);  // a surrogate
  EXPECT_EQ(first_invalid_utf8("\xc0\xaf"), 0);      // overlong
  EXPECT_EQ(printable("caf\xe9!"), "caf\\xE9!");
  EXPECT_EQ(printable("\xff\xfe"), "\\xFF\\xFE");
}

TEST(ErrorContext, OtherExceptionsBecomeOctetErrorsNamingTheContext) {
  try {
    with_error_context("file x.bin", []() -> int { throw std::bad_alloc(); });
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("file x.bin: out of memory"));
  }
  try {
    with_error_context("file y.bin", []() -> int { throw std::out_of_range("stoi"); });
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("file y.bin: stoi"));
  }
  EXPECT_EQ(with_error_context("z", [] { return 7; }), 7);
}

}  // namespace
}  // namespace octet
