// octet's byte-level BPE encoder on one thread: GPT-2's tokenizer (vocab.json + merges.txt) on a
// text file, the best of REPS encodes. bench/bpe_bench.sh runs it beside js-tiktoken.
//   octet_bpe_bench VOCAB_JSON MERGES_TXT TEXT [REPS]   (REPS default 5)
// Prints one JSON line: {"bytes": N, "tokens": T, "seconds": best, "load_seconds": L}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "data/bpe_tokenizer.h"
#include "runtime/text_file.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: octet_bpe_bench VOCAB_JSON MERGES_TXT TEXT [REPS]\n");
    return 2;
  }
  try {
    const int reps = argc == 5 ? std::max(1, std::atoi(argv[4])) : 5;
    auto start = std::chrono::steady_clock::now();
    const auto tokenizer = octet::data::BpeTokenizer::from_vocab_merges(argv[1], argv[2]);
    const double load = seconds_since(start);
    const std::string text = octet::read_file_text(argv[3], "text file");
    double best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < reps; ++r) {
      start = std::chrono::steady_clock::now();
      tokens = tokenizer.encode(text).size();
      best = std::min(best, seconds_since(start));
    }
    std::printf("{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, \"load_seconds\": %.6f}\n",
                text.size(), tokens, best, load);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octet_bpe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
