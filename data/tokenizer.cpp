// Byte tokens or a byte-level BPE behind one interface: loading from tokenizer files, and the
// serialized form a checkpoint carries.
#include "data/tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/text_file.h"

namespace octet::data {
namespace {

constexpr std::string_view kBytesFormat = "octet-bytes";

}  // namespace

Tokenizer Tokenizer::bytes() { return Tokenizer(); }

Tokenizer Tokenizer::bpe(BpeTokenizer tokenizer, std::string source) {
  Tokenizer t;
  t.bpe_ = std::move(tokenizer);
  t.source_ = std::move(source);
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  OCTET_CHECK(!path.empty(), "tokenizer: expected a tokenizer.json or a folder, got an empty path");
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  OCTET_CHECK(fs::exists(status), "tokenizer ", printable(path),
              " does not exist (expected a tokenizer.json, or a folder holding tokenizer.json or "
              "vocab.json + merges.txt)");
  if (!fs::is_directory(status)) return bpe(BpeTokenizer::from_hf_json(path), path);
  const fs::path dir(path);
  if (fs::exists(dir / "tokenizer.json", ec)) {
    return bpe(BpeTokenizer::from_hf_json((dir / "tokenizer.json").string()), path);
  }
  const bool vocab = fs::exists(dir / "vocab.json", ec);
  const bool merges = fs::exists(dir / "merges.txt", ec);
  OCTET_CHECK(vocab && merges, "tokenizer folder ", printable(path),
              " holds neither tokenizer.json nor vocab.json + merges.txt",
              vocab    ? " (it has vocab.json but no merges.txt)"
              : merges ? " (it has merges.txt but no vocab.json)"
                       : "");
  return bpe(
      BpeTokenizer::from_vocab_merges((dir / "vocab.json").string(), (dir / "merges.txt").string()),
      path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (bpe_) return bpe_->encode(text);
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  if (bpe_) return bpe_->decode(ids);
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    OCTET_CHECK(ids[i] >= 0 && ids[i] < 256, "token id ", ids[i],
                " is not a byte (byte tokens: vocabulary 256)");
    text[i] = static_cast<char>(ids[i]);
  }
  return text;
}

int64_t Tokenizer::vocab_size() const { return bpe_ ? bpe_->vocab_size() : 256; }

std::optional<int32_t> Tokenizer::eos_id() const { return bpe_ ? bpe_->eos_id() : std::nullopt; }

std::string Tokenizer::describe() const {
  if (!bpe_) return "byte tokens";
  return "byte-level BPE tokenizer (vocab " + std::to_string(bpe_->vocab_size()) + ") from " +
         printable(source_);
}

std::string Tokenizer::serialize() const {
  if (bpe_) return bpe_->serialize();
  return nlohmann::ordered_json{{"format", kBytesFormat}, {"version", 1}}.dump();
}

Tokenizer Tokenizer::deserialize(std::string_view text, std::string source) {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  OCTET_CHECK(!json.is_discarded() && json.is_object(), "serialized tokenizer of ",
              printable(source), " is not a JSON object");
  const auto format = json.find("format");
  OCTET_CHECK(format != json.end() && format->is_string(), "serialized tokenizer of ",
              printable(source), ": \"format\" is missing or not a string");
  if (format->get<std::string>() != kBytesFormat) {
    try {
      return bpe(BpeTokenizer::deserialize(text), std::move(source));
    } catch (const Error& e) {
      OCTET_FAIL("serialized tokenizer of ", printable(source), ": ", e.what());
    }
  }
  OCTET_CHECK(json.size() == 2 && json.contains("version") && json["version"] == 1,
              "serialized tokenizer of ", printable(source), ": ", printable(text),
              " is not {\"format\":\"octet-bytes\",\"version\":1}");
  return bytes();
}

}  // namespace octet::data
