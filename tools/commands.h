// The subcommands of the `octet` program (train, eval, generate, tokenize, inspect, import,
// export; bench lives in tools/bench.h) and their help texts. Each takes the words after its name
// and returns the exit code; bad input throws octet::Error, which main() prints as one line.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace octet::cli {

using Args = std::vector<std::string>;

int run_train(const Args& args, std::ostream& out);
int run_eval(const Args& args, std::ostream& out);
int run_generate(const Args& args, std::ostream& out, std::ostream& err);
int run_inspect(const Args& args, std::ostream& out);
// `tokenize --tokenizer PATH --out SHARD TEXT...`: text files as one llm.c token shard.
int run_tokenize(const Args& args, std::ostream& out);
// Hugging Face folders: `import HF_DIR --out FILE` writes a run checkpoint, `export FILE --to DIR`
// writes a folder transformers loads.
int run_import(const Args& args, std::ostream& out);
int run_export(const Args& args, std::ostream& out);

// "usage: octet ..." for the program, or for one command ("" for the program).
std::string help_text(std::string_view command);

// An octet::Error's text for a person: the "file.cpp:123: " locations (useful in a debugger, noise
// on a command line) dropped, and on one line.
std::string user_message(std::string_view what);

// Dispatches argv to a command: the whole program behind main(); prints errors to `err`.
int run_octet(const Args& args, std::ostream& out, std::ostream& err);

}  // namespace octet::cli
