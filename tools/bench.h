// `octet bench`: times f32 and each FP8 recipe on GEMMs, a LayerNormMLP, a transformer layer
// training step and a small model; prints a table or, with --json, one object per result.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace octet::bench {

// `args` are the words after "bench" on the command line; returns the process exit code.
// Writes to stdout; bad arguments throw octet::Error naming the argument.
int run_bench(const std::vector<std::string>& args);
// The same, writing the table or JSON to `out` (tests read it back).
int run_bench(const std::vector<std::string>& args, std::ostream& out);

}  // namespace octet::bench
