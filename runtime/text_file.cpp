// Whole-file reads and UTF-8 checks for the parsers of every layer.
#include "runtime/text_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <system_error>

#include "runtime/error.h"

namespace octet {

std::string read_file_text(const std::string& path, std::string_view what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  OCTET_CHECK(!ec, "cannot open ", what, " ", printable(path), ": ", ec.message());
  OCTET_CHECK(!fs::is_directory(status), what, " ", printable(path),
              " is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  OCTET_CHECK(in.good(), "cannot open ", what, " ", printable(path), ": ", std::strerror(errno));
  std::string text;
  try {
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::bad_alloc&) {
    OCTET_FAIL(what, " ", printable(path), " is too large to read into memory");
  } catch (const std::exception& e) {
    OCTET_FAIL("cannot read ", what, " ", printable(path), ": ", e.what());
  }
  OCTET_CHECK(!in.bad(), "cannot read ", what, " ", printable(path), ": read failed after ",
              text.size(), " bytes");
  return text;
}

int64_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    size_t len = 0;
    uint32_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + len > n) return static_cast<int64_t>(i);
    if (s[i + 1] < lo || s[i + 1] > hi) return static_cast<int64_t>(i);
    for (size_t k = 2; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
    }
    i += len;
  }
  return -1;
}

std::string printable(std::string_view text) {
  std::string out;
  while (!text.empty()) {
    const int64_t bad = first_invalid_utf8(text);
    if (bad < 0) {
      out += text;
      break;
    }
    out += text.substr(0, static_cast<size_t>(bad));
    out += fmt::format("\\x{:02X}", static_cast<uint8_t>(text[static_cast<size_t>(bad)]));
    text.remove_prefix(static_cast<size_t>(bad) + 1);
  }
  return out;
}

std::string json_error_text(const char* what) {
  std::string_view text(what);
  if (text.starts_with("[json.exception.")) {
    const size_t end = text.find("] ");
    if (end != std::string_view::npos) text.remove_prefix(end + 2);
  }
  return std::string(text);
}

}  // namespace octet
