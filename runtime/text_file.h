// Reading a whole input file (configs, recipes, text data) with one octet::Error naming the file
// for every way it can fail, and the UTF-8 check that text going into JSON needs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace octet {

// The bytes of the file at `path`. `what` names the kind of file in errors ("config file"): a
// missing file, a directory, a read error and a file too large to hold are each one line.
std::string read_file_text(const std::string& path, std::string_view what);

// Offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points past
// U+10FFFF included), or -1 when the text is valid.
int64_t first_invalid_utf8(std::string_view text);

// `text` for an error message: as is when it is UTF-8, else with each bad byte as \xNN.
std::string printable(std::string_view text);

// An nlohmann::json exception's text without its "[json.exception.parse_error.101] " tag: what a
// person reads after the file's name ("parse error at line 1, column 5: ...").
std::string json_error_text(const char* what);

}  // namespace octet
