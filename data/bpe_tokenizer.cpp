// Byte-level BPE: the two split patterns written out over UTF-8, the merge loop, and the three
// ways in (tokenizer.json, vocab.json + merges.txt, octet's serialized form), which all end in
// one checked build of the tables.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "data/unicode_ranges.h"
#include "runtime/error.h"
#include "runtime/text_file.h"

namespace octet::data {

using json = nlohmann::json;
using detail::CharClass;

namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ---- characters ----

CharClass class_of(uint32_t cp) {
  const auto* begin = std::begin(detail::kCodePointRanges);
  const auto* end = std::end(detail::kCodePointRanges);
  const auto* it = std::upper_bound(
      begin, end, cp, [](uint32_t c, const detail::CodePointRange& r) { return c < r.first; });
  if (it == begin) return CharClass::kOther;
  --it;
  return cp <= it->last ? it->cls : CharClass::kOther;
}

constexpr std::array<CharClass, 128> kAsciiClasses = [] {
  std::array<CharClass, 128> table{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      table[c] = CharClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      table[c] = CharClass::kNumber;
    } else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) {
      table[c] = CharClass::kSpace;
    }
  }
  return table;
}();

constexpr uint32_t kNoCodePoint = 0xFFFFFFFF;

struct Char {
  CharClass cls;
  uint32_t len;  // bytes
  uint32_t cp;   // kNoCodePoint for a byte that is not valid UTF-8
};

// The character at byte i (i < s.size()). A byte that does not start a valid UTF-8 sequence
// (overlong forms, surrogates and code points past U+10FFFF are invalid) is one kOther character.
Char char_at(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t b0 = p[i];
  if (b0 < 0x80) return {kAsciiClasses[b0], 1, b0};
  constexpr Char kInvalid = {CharClass::kOther, 1, kNoCodePoint};
  uint32_t extra = 0, cp = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    extra = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    extra = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    extra = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return kInvalid;
  }
  if (s.size() - i <= extra) return kInvalid;
  if (p[i + 1] < lo || p[i + 1] > hi) return kInvalid;
  for (uint32_t k = 1; k <= extra; ++k) {
    if ((p[i + k] & 0xC0) != 0x80) return kInvalid;
    cp = cp << 6 | (p[i + k] & 0x3F);
  }
  return {class_of(cp), extra + 1, cp};
}

bool is_newline(const Char& c) { return c.cp == '\r' || c.cp == '\n'; }

size_t run_end(std::string_view s, size_t i, CharClass cls) {
  while (i < s.size()) {
    const Char c = char_at(s, i);
    if (c.cls != cls) break;
    i += c.len;
  }
  return i;
}

// 's 't 're 've 'm 'll 'd at s[i] == '\'': the end of the contraction, or i when there is none.
// `any_case` is Llama-3's (?i:...), under which ſ (U+017F) also matches s.
size_t contraction_end(std::string_view s, size_t i, bool any_case) {
  auto at = [&](size_t k) -> char {
    if (k >= s.size()) return 0;
    const char c = s[k];
    return any_case && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  };
  const char a = at(i + 1), b = at(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  if (any_case && s.substr(i + 1, 2) == "\xC5\xBF") return i + 3;
  return i;
}

// At a whitespace character: `\s*[\r\n]+` (when `newlines`), then `\s+(?!\S)`, then `\s+`.
size_t space_end(std::string_view s, size_t i, bool newlines) {
  size_t j = i, last = i, after_newline = 0, count = 0;
  while (j < s.size()) {
    const Char c = char_at(s, j);
    if (c.cls != CharClass::kSpace) break;
    if (is_newline(c)) after_newline = j + 1;
    last = j;
    j += c.len;
    ++count;
  }
  if (newlines && after_newline != 0) return after_newline;
  // \s+(?!\S) gives back the last space before a non-space, unless that leaves nothing.
  return j == s.size() || count == 1 ? j : last;
}

size_t gpt2_piece_end(std::string_view s, size_t i) {
  if (s[i] == '\'') {
    const size_t e = contraction_end(s, i, false);
    if (e != i) return e;
  }
  const Char c = char_at(s, i);
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: one space joins the run after it.
  if (c.cp == ' ' && i + 1 < s.size()) {
    const Char d = char_at(s, i + 1);
    if (d.cls != CharClass::kSpace) return run_end(s, i + 1, d.cls);
  }
  if (c.cls != CharClass::kSpace) return run_end(s, i, c.cls);
  return space_end(s, i, false);
}

size_t llama3_piece_end(std::string_view s, size_t i) {
  if (s[i] == '\'') {
    const size_t e = contraction_end(s, i, true);
    if (e != i) return e;
  }
  const Char c = char_at(s, i);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls == CharClass::kLetter) return run_end(s, i, CharClass::kLetter);
  if (c.cls != CharClass::kNumber && !is_newline(c) && i + c.len < s.size() &&
      char_at(s, i + c.len).cls == CharClass::kLetter) {
    return run_end(s, i + c.len, CharClass::kLetter);
  }
  // \p{N}{1,3}
  if (c.cls == CharClass::kNumber) {
    size_t j = i + c.len;
    for (int n = 1; n < 3 && j < s.size(); ++n) {
      const Char d = char_at(s, j);
      if (d.cls != CharClass::kNumber) break;
      j += d.len;
    }
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t k = std::string_view::npos;
  if (c.cls == CharClass::kOther) {
    k = i;
  } else if (c.cp == ' ' && i + 1 < s.size() && char_at(s, i + 1).cls == CharClass::kOther) {
    k = i + 1;
  }
  if (k != std::string_view::npos) {
    size_t e = run_end(s, k, CharClass::kOther);
    while (e < s.size() && (s[e] == '\r' || s[e] == '\n')) ++e;
    return e;
  }
  return space_end(s, i, true);
}

size_t piece_end(std::string_view s, size_t i, SplitPattern pattern) {
  return pattern == SplitPattern::kGpt2 ? gpt2_piece_end(s, i) : llama3_piece_end(s, i);
}

// ---- GPT-2's byte-to-unicode table ----

// Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7F-0xA0, 0xAD)
// take the code points from U+0100 on, in byte order.
struct ByteMap {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // code points 0..323; -1: no byte
};

constexpr ByteMap kByteMap = [] {
  ByteMap m{};
  for (auto& b : m.to_byte) b = -1;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    m.to_char[b] = printable ? b : next++;
    m.to_byte[m.to_char[b]] = static_cast<int16_t>(b);
  }
  return m;
}();

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {  // the table's code points are below U+0800
    out.push_back(static_cast<char>(0xC0 | cp >> 6));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Bytes as a vocabulary file writes them.
std::string to_vocab_string(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, kByteMap.to_char[static_cast<uint8_t>(b)]);
  return out;
}

// A vocabulary file's string as bytes; nullopt when a character is not in the table.
std::optional<std::string> from_vocab_string(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Char c = char_at(text, i);
    if (c.cp == kNoCodePoint || c.cp >= kByteMap.to_byte.size()) return std::nullopt;
    const int16_t b = kByteMap.to_byte[c.cp];
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += c.len;
  }
  return out;
}

// ---- the pair table ----

// Open addressing from an (left id, right id) pair to its merge rank and merged id.
class PairTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = 0;
  };

  void reserve(size_t n) {
    size_t capacity = 16;
    while (capacity < 2 * n) capacity *= 2;
    entries_.assign(capacity, Entry{});
    shift_ = 64 - std::countr_zero(capacity);
  }
  // The first insertion of a pair (its lowest rank) stays.
  void insert(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
    const uint64_t key = key_of(left, right);
    for (size_t i = slot(key);; i = (i + 1) & (entries_.size() - 1)) {
      if (entries_[i].key == key) return;
      if (entries_[i].key == kEmpty) {
        entries_[i] = {key, rank, merged};
        return;
      }
    }
  }
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t key = key_of(left, right);
    for (size_t i = slot(key);; i = (i + 1) & (entries_.size() - 1)) {
      if (entries_[i].key == key) return &entries_[i];
      if (entries_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key_of(int32_t left, int32_t right) {
    return uint64_t{static_cast<uint32_t>(left)} << 32 | static_cast<uint32_t>(right);
  }
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }

  std::vector<Entry> entries_;
  int shift_ = 60;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();
// Ids above this are refused: a hostile file could otherwise ask for any amount of memory.
constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;
// A piece longer than this merges through a heap (n log n) instead of rescanning (n^2).
constexpr size_t kShortPiece = 96;
// Pieces remembered per encode() call, when merging is not a single lookup.
constexpr size_t kCacheEntries = 1 << 15;

}  // namespace

// ---- the split patterns ----

std::string_view split_pattern_name(SplitPattern pattern) {
  return pattern == SplitPattern::kGpt2 ? "gpt2" : "llama3";
}

std::string_view split_pattern_regex(SplitPattern pattern) {
  return pattern == SplitPattern::kGpt2 ? kGpt2Regex : kLlama3Regex;
}

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  return std::nullopt;
}

std::vector<size_t> detail::split_pieces(std::string_view text, SplitPattern pattern) {
  std::vector<size_t> ends;
  for (size_t i = 0; i < text.size();) {
    i = piece_end(text, i, pattern);
    ends.push_back(i);
  }
  return ends;
}

// ---- the tables ----

// What a loader reads, before the checks and indexes of build().
struct Draft {
  SplitPattern pattern = SplitPattern::kGpt2;
  bool whole_piece_first = false;  // a piece that is a token is that token (tiktoken)
  bool any_split = false;  // any two tokens that make a merged token merge (tiktoken's ranks)
  std::map<int32_t, std::string> model;                // id -> bytes
  std::vector<std::pair<int32_t, int32_t>> merges;     // in rank order
  std::vector<std::pair<int32_t, std::string>> added;  // id, content
  std::optional<int32_t> eos;
};

struct BpeTokenizer::Impl {
  enum class Kind : uint8_t { kNone, kModel, kAdded };
  struct Added {
    std::string content;
    int32_t id;
  };

  SplitPattern pattern = SplitPattern::kGpt2;
  bool whole_piece_first = false;
  bool any_split = false;
  std::vector<Kind> kinds;        // per id
  std::vector<uint32_t> offsets;  // token id's bytes: blob[offsets[id], offsets[id + 1])
  std::string blob;
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<Added> added;  // by first byte, the longer first: the first match is the longest
  std::optional<int32_t> eos;

  std::array<int32_t, 256> byte_ids{};
  StringMap<int32_t> model_ids;
  PairTable pairs;
  std::array<bool, 256> added_first_byte{};

  std::string_view bytes(int32_t id) const {
    return std::string_view(blob).substr(offsets[id], offsets[id + 1] - offsets[id]);
  }

  static std::shared_ptr<const Impl> build(Draft draft, const std::string& context);
  void merge(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_long(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view text, std::vector<int32_t>& out,
                      StringMap<std::vector<int32_t>>& cache) const;
};

std::shared_ptr<const BpeTokenizer::Impl> BpeTokenizer::Impl::build(Draft draft,
                                                                    const std::string& context) {
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;
  t.pattern = draft.pattern;
  t.whole_piece_first = draft.whole_piece_first;
  t.any_split = draft.any_split;

  int64_t max_id = -1;
  for (const auto& [id, bytes] : draft.model) {
    OCTET_CHECK(id >= 0 && id <= kMaxId, context, ": token id ", id, " is outside [0, ", kMaxId,
                "]");
    OCTET_CHECK(!bytes.empty(), context, ": token id ", id, " is empty");
    max_id = std::max<int64_t>(max_id, id);
  }
  std::map<int32_t, std::string> added_by_id;
  for (const auto& [id, content] : draft.added) {
    OCTET_CHECK(id >= 0 && id <= kMaxId, context, ": added token id ", id, " is outside [0, ",
                kMaxId, "]");
    OCTET_CHECK(!content.empty(), context, ": added token id ", id, " is empty");
    OCTET_CHECK(added_by_id.emplace(id, content).second, context, ": added token id ", id,
                " appears twice");
    const auto model = draft.model.find(id);
    OCTET_CHECK(model == draft.model.end() || model->second == content, context,
                ": added token id ", id, " \"", printable(content),
                "\" is another token in the model's vocabulary: \"",
                printable(to_vocab_string(model->second)), "\"");
    max_id = std::max<int64_t>(max_id, id);
  }
  const int64_t defined = static_cast<int64_t>(draft.model.size() + added_by_id.size());
  OCTET_CHECK(max_id + 1 <= 2 * defined + 1024, context, ": token ids go up to ", max_id,
              " but only ", defined, " are defined (the ids must be dense)");

  t.kinds.assign(max_id + 1, Kind::kNone);
  t.offsets.assign(max_id + 2, 0);
  for (int64_t id = 0; id <= max_id; ++id) {
    t.offsets[id] = static_cast<uint32_t>(t.blob.size());
    const auto model = draft.model.find(static_cast<int32_t>(id));
    const auto added = added_by_id.find(static_cast<int32_t>(id));
    if (added != added_by_id.end()) {
      t.kinds[id] = Kind::kAdded;
      t.blob += added->second;
    } else if (model != draft.model.end()) {
      t.kinds[id] = Kind::kModel;
      t.blob += model->second;
    }
    OCTET_CHECK(t.blob.size() < std::numeric_limits<uint32_t>::max(), context,
                ": the tokens hold more than 4 GiB");
  }
  t.offsets[max_id + 1] = static_cast<uint32_t>(t.blob.size());

  t.model_ids.reserve(draft.model.size());
  for (const auto& [id, bytes] : draft.model) {
    const auto [it, inserted] = t.model_ids.emplace(bytes, id);
    OCTET_CHECK(inserted, context, ": tokens ", it->second, " and ", id, " are both \"",
                printable(to_vocab_string(bytes)), "\"");
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = t.model_ids.find(std::string_view(std::string(1, static_cast<char>(b))));
    OCTET_CHECK(it != t.model_ids.end(), context, ": the vocabulary has no token for byte ", b,
                " (\"", printable(to_vocab_string(std::string(1, static_cast<char>(b)))),
                "\"): a byte-level BPE needs all 256");
    t.byte_ids[b] = it->second;
  }

  // Ranks: a merge's index. With any_split, every split of a merged token into two tokens merges
  // at the rank of the merge that first made it (tiktoken's rule: a pair's rank is its
  // concatenation's); otherwise only the merges listed.
  t.merges = std::move(draft.merges);
  t.pairs.reserve(t.any_split ? 4 * t.merges.size() : t.merges.size());
  std::vector<bool> ranked(max_id + 1, false);
  for (size_t r = 0; r < t.merges.size(); ++r) {
    const auto [left, right] = t.merges[r];
    for (int32_t id : {left, right}) {
      OCTET_CHECK(id >= 0 && id <= max_id && t.kinds[id] == Kind::kModel, context, ": merge ", r,
                  " names id ", id, ", which is not a token of the model");
    }
    const std::string joined = std::string(t.bytes(left)) + std::string(t.bytes(right));
    const auto it = t.model_ids.find(std::string_view(joined));
    OCTET_CHECK(it != t.model_ids.end(), context, ": merge ", r, " (\"",
                printable(to_vocab_string(t.bytes(left))), "\" \"",
                printable(to_vocab_string(t.bytes(right))), "\") makes \"",
                printable(to_vocab_string(joined)), "\", which is not in the vocabulary");
    const int32_t merged = it->second;
    if (!t.any_split) {
      t.pairs.insert(left, right, static_cast<uint32_t>(r), merged);
    } else if (!ranked[merged]) {
      ranked[merged] = true;
      for (size_t k = 1; k < joined.size(); ++k) {
        const auto a = t.model_ids.find(std::string_view(joined).substr(0, k));
        const auto b = t.model_ids.find(std::string_view(joined).substr(k));
        if (a != t.model_ids.end() && b != t.model_ids.end()) {
          t.pairs.insert(a->second, b->second, static_cast<uint32_t>(r), merged);
        }
      }
    }
  }

  for (auto& [id, content] : added_by_id) {
    t.added.push_back({std::move(content), id});
    t.added_first_byte[static_cast<uint8_t>(t.added.back().content[0])] = true;
  }
  std::sort(t.added.begin(), t.added.end(), [](const Added& a, const Added& b) {
    if (a.content[0] != b.content[0]) return a.content[0] < b.content[0];
    return a.content.size() > b.content.size();
  });
  if (draft.eos) {
    OCTET_CHECK(*draft.eos >= 0 && *draft.eos <= max_id && t.kinds[*draft.eos] != Kind::kNone,
                context, ": end-of-sequence id ", *draft.eos, " is not a token");
  }
  t.eos = draft.eos;
  return impl;
}

// ---- encoding ----

void BpeTokenizer::Impl::merge(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  if (n > kShortPiece) return merge_long(piece, out);
  // Symbols and the rank of each adjacent pair; merge the lowest rank (the leftmost of equals),
  // then look up only the two pairs that changed.
  std::array<int32_t, kShortPiece> ids;
  std::array<uint32_t, kShortPiece> ranks;
  std::array<int32_t, kShortPiece> merged;
  auto look = [&](size_t k) {
    const PairTable::Entry* e = pairs.find(ids[k], ids[k + 1]);
    ranks[k] = e ? e->rank : kNoRank;
    merged[k] = e ? e->merged : -1;
  };
  size_t m = n;
  for (size_t k = 0; k < n; ++k) ids[k] = byte_ids[static_cast<uint8_t>(piece[k])];
  for (size_t k = 0; k + 1 < m; ++k) look(k);
  while (m > 1) {
    size_t best = 0;
    for (size_t k = 1; k + 1 < m; ++k) {
      if (ranks[k] < ranks[best]) best = k;
    }
    if (ranks[best] == kNoRank) break;
    ids[best] = merged[best];
    for (size_t k = best + 1; k + 1 < m; ++k) {
      ids[k] = ids[k + 1];
      ranks[k] = ranks[k + 1];
      merged[k] = merged[k + 1];
    }
    --m;
    if (best > 0) look(best - 1);
    if (best + 1 < m) look(best);
  }
  out.insert(out.end(), ids.begin(), ids.begin() + m);
}

void BpeTokenizer::Impl::merge_long(std::string_view piece, std::vector<int32_t>& out) const {
  // The same merges in the same order, for long pieces: symbols in a linked list, candidate
  // pairs in a heap ordered by (rank, position), a popped pair checked against what is there now
  // (a token's bytes only grow, so equal ids at equal positions are the same symbols).
  const size_t n = piece.size();
  std::vector<int32_t> ids(n), next(n), prev(n);
  for (size_t k = 0; k < n; ++k) {
    ids[k] = byte_ids[static_cast<uint8_t>(piece[k])];
    next[k] = k + 1 < n ? static_cast<int32_t>(k + 1) : -1;
    prev[k] = static_cast<int32_t>(k) - 1;
  }
  struct Candidate {
    uint32_t rank;
    int32_t pos, left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const PairTable::Entry* e = pairs.find(ids[pos], ids[next[pos]])) {
      heap.push({e->rank, pos, ids[pos], ids[next[pos]], e->merged});
    }
  };
  for (size_t k = 0; k + 1 < n; ++k) push(static_cast<int32_t>(k));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[c.pos];
    if (ids[c.pos] != c.left || right < 0 || ids[right] != c.right) continue;
    ids[c.pos] = c.merged;
    ids[right] = -1;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int32_t k = 0; k >= 0; k = next[k]) out.push_back(ids[k]);
}

void BpeTokenizer::Impl::encode_segment(std::string_view text, std::vector<int32_t>& out,
                                        StringMap<std::vector<int32_t>>& cache) const {
  for (size_t i = 0; i < text.size();) {
    const size_t end = piece_end(text, i, pattern);
    const std::string_view piece = text.substr(i, end - i);
    i = end;
    if (piece.size() == 1) {
      out.push_back(byte_ids[static_cast<uint8_t>(piece[0])]);
      continue;
    }
    if (whole_piece_first) {
      const auto it = model_ids.find(piece);
      if (it != model_ids.end()) {
        out.push_back(it->second);
        continue;
      }
    }
    const auto hit = cache.find(piece);
    if (hit != cache.end()) {
      out.insert(out.end(), hit->second.begin(), hit->second.end());
      continue;
    }
    const size_t first = out.size();
    merge(piece, out);
    if (cache.size() >= kCacheEntries) cache.clear();
    cache.emplace(std::string(piece), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 16);
  StringMap<std::vector<int32_t>> cache;
  // Added tokens first, verbatim: at the leftmost position where one starts, the longest.
  size_t segment = 0;
  if (!t.added.empty()) {
    for (size_t i = 0; i < text.size(); ++i) {
      const auto b = static_cast<uint8_t>(text[i]);
      if (!t.added_first_byte[b]) continue;
      const auto first = std::lower_bound(
          t.added.begin(), t.added.end(), b,
          [](const Impl::Added& a, uint8_t c) { return static_cast<uint8_t>(a.content[0]) < c; });
      for (auto it = first; it != t.added.end() && static_cast<uint8_t>(it->content[0]) == b;
           ++it) {
        if (text.substr(i, it->content.size()) != it->content) continue;
        t.encode_segment(text.substr(segment, i - segment), out, cache);
        out.push_back(it->id);
        i += it->content.size() - 1;
        segment = i + 1;
        break;
      }
    }
  }
  t.encode_segment(text.substr(std::min(segment, text.size())), out, cache);
  return out;
}

std::string_view BpeTokenizer::token_bytes(int32_t id) const {
  const Impl& t = *impl_;
  OCTET_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary (size ",
              vocab_size(), ")");
  OCTET_CHECK(t.kinds[id] != Impl::Kind::kNone, "token id ", id,
              " is not a token of this vocabulary (size ", vocab_size(), ")");
  return t.bytes(id);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

int64_t BpeTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->kinds.size()); }
std::optional<int32_t> BpeTokenizer::eos_id() const { return impl_->eos; }
SplitPattern BpeTokenizer::pattern() const { return impl_->pattern; }

// ---- loading ----

namespace {

// JSON access whose every failure names the source and the key path.
struct JsonReader {
  std::string context;

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    OCTET_FAIL(context, ": ", path, ": ", what);
  }
  const json& member(const json& obj, const std::string& path, const char* key) const {
    if (!obj.is_object()) fail(path, "expected an object, got " + std::string(obj.type_name()));
    const auto it = obj.find(key);
    if (it == obj.end()) fail(join(path, key), "missing");
    return *it;
  }
  const json* optional_member(const json& obj, const char* key) const {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string(const json& v, const std::string& path) const {
    if (!v.is_string()) fail(path, "expected a string, got " + std::string(v.type_name()));
    return v.get<std::string>();
  }
  int32_t id(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail(path, "expected an integer id, got " + v.dump());
    const auto x = v.get<int64_t>();
    if (x < 0 || x > kMaxId) fail(path, "id " + std::to_string(x) + " is outside [0, 16777215]");
    return static_cast<int32_t>(x);
  }
  bool boolean(const json& v, const std::string& path) const {
    if (!v.is_boolean()) fail(path, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }
  const json& array(const json& v, const std::string& path) const {
    if (!v.is_array()) fail(path, "expected an array, got " + std::string(v.type_name()));
    return v;
  }
  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string index(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }
};

json parse_json(std::string_view text, const std::string& context) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    OCTET_FAIL(context, ": ", json_error_text(e.what()));
  }
}

// Token strings of a vocabulary file -> bytes and ids.
void read_vocab(const JsonReader& r, const json& vocab, const std::string& path,
                const std::map<std::string, int32_t>& added, Draft& draft,
                StringMap<int32_t>& ids) {
  if (!vocab.is_object()) r.fail(path, "expected an object of token: id");
  for (const auto& [key, value] : vocab.items()) {
    const std::string where = path + "[\"" + printable(key) + "\"]";
    const int32_t id = r.id(value, where);
    std::optional<std::string> bytes = from_vocab_string(key);
    if (!bytes) {
      // A token outside the byte-level alphabet is only an added token listed again.
      const auto it = added.find(key);
      if (it == added.end() || it->second != id) {
        r.fail(where, "not a byte-level token (a character outside GPT-2's byte alphabet)");
      }
      ids.emplace(key, id);
      continue;
    }
    if (!draft.model.emplace(id, *bytes).second)
      r.fail(where, "id " + std::to_string(id) + " appears twice");
    ids.emplace(key, id);
  }
}

int32_t merge_part(const JsonReader& r, const StringMap<int32_t>& ids, const std::string& token,
                   const std::string& where, const std::string& vocab_name) {
  const auto it = ids.find(std::string_view(token));
  if (it == ids.end()) r.fail(where, "token \"" + printable(token) + "\" is not in " + vocab_name);
  return it->second;
}

std::optional<SplitPattern> read_byte_level(const JsonReader& r, const json& p,
                                            const std::string& path) {
  if (const json* v = r.optional_member(p, "add_prefix_space");
      v && r.boolean(*v, path + ".add_prefix_space")) {
    r.fail(path + ".add_prefix_space",
           "true is not supported (decode would not give the text back)");
  }
  const json* use_regex = r.optional_member(p, "use_regex");
  if (!use_regex || r.boolean(*use_regex, path + ".use_regex")) return SplitPattern::kGpt2;
  return std::nullopt;
}

SplitPattern read_pre_tokenizer(const JsonReader& r, const json& root) {
  const json& pre = r.member(root, "", "pre_tokenizer");
  const std::string type = r.string(r.member(pre, "pre_tokenizer", "type"), "pre_tokenizer.type");
  if (type == "ByteLevel") {
    const auto p = read_byte_level(r, pre, "pre_tokenizer");
    if (!p) r.fail("pre_tokenizer.use_regex", "false leaves no split pattern");
    return *p;
  }
  if (type != "Sequence")
    r.fail("pre_tokenizer.type",
           "\"" + type + "\" is not supported (ByteLevel, or a Sequence of Split and ByteLevel)");
  const json& list =
      r.array(r.member(pre, "pre_tokenizer", "pretokenizers"), "pre_tokenizer.pretokenizers");
  std::optional<SplitPattern> pattern;
  bool byte_level = false;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = JsonReader::index("pre_tokenizer.pretokenizers", i);
    const std::string kind = r.string(r.member(list[i], path, "type"), path + ".type");
    if (kind == "ByteLevel") {
      if (byte_level) r.fail(path, "a second ByteLevel");
      byte_level = true;
      if (const auto p = read_byte_level(r, list[i], path)) {
        if (pattern) r.fail(path + ".use_regex", "true after a Split would split twice");
        pattern = p;
      }
    } else if (kind == "Split") {
      if (pattern || byte_level) r.fail(path, "a Split must come first, and only once");
      const json& pat = r.member(list[i], path, "pattern");
      const std::string regex =
          r.string(r.member(pat, path + ".pattern", "Regex"), path + ".pattern.Regex");
      pattern = split_pattern_from_regex(regex);
      if (!pattern) {
        r.fail(path + ".pattern.Regex",
               "the pattern " + printable(regex) + " is not one octet knows (GPT-2's: " +
                   std::string(kGpt2Regex) + ", Llama-3's: " + std::string(kLlama3Regex) + ")");
      }
      const std::string behavior =
          r.string(r.member(list[i], path, "behavior"), path + ".behavior");
      if (behavior != "Isolated")
        r.fail(path + ".behavior", "\"" + behavior + "\" is not supported (Isolated)");
      if (const json* v = r.optional_member(list[i], "invert");
          v && r.boolean(*v, path + ".invert")) {
        r.fail(path + ".invert", "true is not supported");
      }
    } else {
      r.fail(path + ".type", "\"" + kind + "\" is not supported (Split, ByteLevel)");
    }
  }
  if (!byte_level) r.fail("pre_tokenizer", "no ByteLevel step: not a byte-level BPE");
  if (!pattern) r.fail("pre_tokenizer", "no split pattern");
  return *pattern;
}

// Names under which tokenizer.json files carry their end-of-sequence token (the file does not
// say which token it is; tokenizer_config.json does).
constexpr std::array<std::string_view, 4> kEosNames = {"<|endoftext|>", "<|end_of_text|>", "</s>",
                                                       "<eos>"};

}  // namespace

BpeTokenizer BpeTokenizer::from_hf_json(const std::string& path) {
  const std::string context = "tokenizer file " + path;
  return with_error_context(context, [&] {
    const JsonReader r{context};
    const json root = parse_json(read_file_text(path, "tokenizer file"), context);
    if (!root.is_object()) r.fail("(top level)", "expected an object");
    const json& model = r.member(root, "", "model");
    const std::string type = r.string(r.member(model, "model", "type"), "model.type");
    if (type != "BPE") r.fail("model.type", "\"" + type + "\" is not supported (BPE)");
    if (const json* n = r.optional_member(root, "normalizer")) {
      r.fail("normalizer", "not supported (a byte-level BPE has none): " + n->dump().substr(0, 80));
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (const json* v = r.optional_member(model, key);
          v && !(v->is_string() && v->get<std::string>().empty())) {
        r.fail(std::string("model.") + key, "not supported: " + v->dump());
      }
    }
    if (const json* v = r.optional_member(model, "dropout");
        v && !(v->is_number() && v->get<double>() == 0.0)) {
      r.fail("model.dropout", "not supported: " + v->dump());
    }
    if (const json* v = r.optional_member(model, "byte_fallback");
        v && r.boolean(*v, "model.byte_fallback")) {
      r.fail("model.byte_fallback", "true is not supported (byte-level BPE needs no fallback)");
    }

    Draft draft;
    draft.pattern = read_pre_tokenizer(r, root);
    if (const json* v = r.optional_member(model, "ignore_merges")) {
      draft.whole_piece_first = r.boolean(*v, "model.ignore_merges");
    }

    std::map<std::string, int32_t> added;
    if (const json* list = r.optional_member(root, "added_tokens")) {
      r.array(*list, "added_tokens");
      for (size_t i = 0; i < list->size(); ++i) {
        const std::string where = JsonReader::index("added_tokens", i);
        const json& a = (*list)[i];
        const int32_t id = r.id(r.member(a, where, "id"), where + ".id");
        const std::string content = r.string(r.member(a, where, "content"), where + ".content");
        if (content.empty()) r.fail(where + ".content", "empty");
        for (const char* key : {"lstrip", "rstrip", "single_word"}) {
          if (const json* v = r.optional_member(a, key); v && r.boolean(*v, where + "." + key)) {
            r.fail(where + "." + key, "true is not supported");
          }
        }
        if (!added.emplace(content, id).second)
          r.fail(where, "\"" + printable(content) + "\" appears twice");
        draft.added.emplace_back(id, content);
      }
    }

    StringMap<int32_t> ids;
    read_vocab(r, r.member(model, "model", "vocab"), "model.vocab", added, draft, ids);
    const json& merges = r.array(r.member(model, "model", "merges"), "model.merges");
    draft.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string where = JsonReader::index("model.merges", i);
      const json& m = merges[i];
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
          r.fail(where, "\"" + printable(s) + "\" is not two tokens separated by one space");
        }
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2) {
        a = r.string(m[0], where + "[0]");
        b = r.string(m[1], where + "[1]");
      } else {
        r.fail(where, "expected \"a b\" or [a, b], got " + m.dump().substr(0, 80));
      }
      draft.merges.emplace_back(merge_part(r, ids, a, where, "model.vocab"),
                                merge_part(r, ids, b, where, "model.vocab"));
    }
    for (std::string_view name : kEosNames) {
      const auto it = added.find(std::string(name));
      if (it != added.end()) {
        draft.eos = it->second;
        break;
      }
    }
    return BpeTokenizer(Impl::build(std::move(draft), context));
  });
}

BpeTokenizer BpeTokenizer::from_vocab_merges(const std::string& vocab_json,
                                             const std::string& merges_txt) {
  const std::string context = "tokenizer files " + vocab_json + " and " + merges_txt;
  return with_error_context(context, [&] {
    Draft draft;
    draft.pattern = SplitPattern::kGpt2;
    draft.whole_piece_first = true;
    draft.any_split = true;
    StringMap<int32_t> ids;
    {
      const std::string vocab_context = "vocabulary file " + vocab_json;
      const JsonReader r{vocab_context};
      const json vocab = parse_json(read_file_text(vocab_json, "vocabulary file"), vocab_context);
      read_vocab(r, vocab, "(top level)", {}, draft, ids);
    }
    const std::string merges_context = "merges file " + merges_txt;
    const JsonReader r{merges_context};
    const std::string text = read_file_text(merges_txt, "merges file");
    size_t line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string_view line = std::string_view(text).substr(pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
      const std::string where = "line " + std::to_string(line_no);
      const size_t space = line.find(' ');
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
        r.fail(where, "\"" + printable(line) + "\" is not two tokens separated by one space");
      }
      draft.merges.emplace_back(
          merge_part(r, ids, std::string(line.substr(0, space)), where, vocab_json),
          merge_part(r, ids, std::string(line.substr(space + 1)), where, vocab_json));
    }
    const auto eot = ids.find(std::string_view("<|endoftext|>"));
    if (eot != ids.end()) {
      draft.added.emplace_back(eot->second, "<|endoftext|>");
      draft.eos = eot->second;
    }
    return BpeTokenizer(Impl::build(std::move(draft), context));
  });
}

BpeTokenizer BpeTokenizer::from_merges(
    SplitPattern pattern, const std::vector<std::pair<std::string, std::string>>& merges,
    const std::vector<std::string>& added) {
  const std::string context = "tokenizer made from merges";
  Draft draft;
  draft.pattern = pattern;
  StringMap<int32_t> ids;
  auto add_model = [&](const std::string& bytes) {
    const auto id = static_cast<int32_t>(draft.model.size());
    draft.model.emplace(id, bytes);
    ids.emplace(bytes, id);
  };
  for (int b = 0; b < 256; ++b) add_model(std::string(1, static_cast<char>(b)));
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    const auto left = ids.find(std::string_view(a));
    const auto right = ids.find(std::string_view(b));
    OCTET_CHECK(left != ids.end() && right != ids.end(), context, ": merge ", i, " (\"",
                printable(a), "\" \"", printable(b), "\") names a token not made before it");
    draft.merges.emplace_back(left->second, right->second);
    if (ids.find(std::string_view(a + b)) == ids.end()) add_model(a + b);
  }
  for (const std::string& content : added) {
    const auto id = static_cast<int32_t>(draft.model.size() + draft.added.size());
    draft.added.emplace_back(id, content);
    if (std::find(kEosNames.begin(), kEosNames.end(), content) != kEosNames.end() && !draft.eos) {
      draft.eos = id;
    }
  }
  return BpeTokenizer(Impl::build(std::move(draft), context));
}

// ---- the serialized form ----

std::string BpeTokenizer::serialize() const {
  const Impl& t = *impl_;
  json tokens = json::array();
  json added = json::array();
  for (size_t id = 0; id < t.kinds.size(); ++id) {
    const std::string bytes(t.bytes(static_cast<int32_t>(id)));
    switch (t.kinds[id]) {
      case Impl::Kind::kModel:
        tokens.push_back(to_vocab_string(bytes));
        break;
      case Impl::Kind::kAdded:
        // An added token that is also a model token keeps both roles.
        tokens.push_back(t.model_ids.count(bytes) != 0 &&
                                 t.model_ids.at(bytes) == static_cast<int32_t>(id)
                             ? json(to_vocab_string(bytes))
                             : json(nullptr));
        added.push_back(json::array({id, to_vocab_string(bytes)}));
        break;
      case Impl::Kind::kNone:
        tokens.push_back(nullptr);
        break;
    }
  }
  std::vector<int32_t> merges;
  merges.reserve(2 * t.merges.size());
  for (const auto& [a, b] : t.merges) {
    merges.push_back(a);
    merges.push_back(b);
  }
  json out = {{"format", "octet-bpe"},
              {"version", 1},
              {"pattern", split_pattern_name(t.pattern)},
              {"whole_piece_first", t.whole_piece_first},
              {"any_split", t.any_split},
              {"tokens", std::move(tokens)},
              {"merges", std::move(merges)},
              {"added", std::move(added)},
              {"eos", t.eos ? json(*t.eos) : json(nullptr)}};
  return out.dump();
}

BpeTokenizer BpeTokenizer::deserialize(std::string_view text) {
  const std::string context = "serialized tokenizer";
  return with_error_context(context, [&] {
    const JsonReader r{context};
    const json root = parse_json(text, context);
    if (!root.is_object()) r.fail("(top level)", "expected an object");
    for (const auto& [key, value] : root.items()) {
      static constexpr std::array<std::string_view, 9> kKeys = {
          "format", "version", "pattern", "whole_piece_first", "any_split", "tokens",
          "merges", "added",   "eos"};
      if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) r.fail(key, "unknown key");
    }
    if (r.string(r.member(root, "", "format"), "format") != "octet-bpe") {
      r.fail("format", "expected \"octet-bpe\"");
    }
    const json& version = r.member(root, "", "version");
    if (version != json(1)) r.fail("version", version.dump() + " is not a version octet reads (1)");
    Draft draft;
    const std::string pattern = r.string(r.member(root, "", "pattern"), "pattern");
    if (pattern == "gpt2") {
      draft.pattern = SplitPattern::kGpt2;
    } else if (pattern == "llama3") {
      draft.pattern = SplitPattern::kLlama3;
    } else {
      r.fail("pattern", "\"" + printable(pattern) + "\" is not gpt2 or llama3");
    }
    draft.whole_piece_first =
        r.boolean(r.member(root, "", "whole_piece_first"), "whole_piece_first");
    draft.any_split = r.boolean(r.member(root, "", "any_split"), "any_split");
    const json& tokens = r.array(r.member(root, "", "tokens"), "tokens");
    if (static_cast<int64_t>(tokens.size()) > kMaxId + 1) r.fail("tokens", "more than 2^24 tokens");
    for (size_t id = 0; id < tokens.size(); ++id) {
      if (tokens[id].is_null()) continue;
      const std::string where = JsonReader::index("tokens", id);
      const auto bytes = from_vocab_string(r.string(tokens[id], where));
      if (!bytes) r.fail(where, "not a byte-level token");
      draft.model.emplace(static_cast<int32_t>(id), *bytes);
    }
    const json& merges = r.array(r.member(root, "", "merges"), "merges");
    if (merges.size() % 2 != 0) r.fail("merges", "an odd number of ids (expected pairs)");
    draft.merges.reserve(merges.size() / 2);
    for (size_t i = 0; i < merges.size(); i += 2) {
      draft.merges.emplace_back(r.id(merges[i], JsonReader::index("merges", i)),
                                r.id(merges[i + 1], JsonReader::index("merges", i + 1)));
    }
    const json& added = r.array(r.member(root, "", "added"), "added");
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string where = JsonReader::index("added", i);
      if (!added[i].is_array() || added[i].size() != 2) r.fail(where, "expected [id, token]");
      const auto content = from_vocab_string(r.string(added[i][1], where + "[1]"));
      if (!content) r.fail(where + "[1]", "not a byte-level token");
      draft.added.emplace_back(r.id(added[i][0], where + "[0]"), *content);
    }
    if (const json* eos = r.optional_member(root, "eos")) draft.eos = r.id(*eos, "eos");
    return BpeTokenizer(Impl::build(std::move(draft), context));
  });
}

}  // namespace octet::data
