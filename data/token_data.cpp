// llm.c token shards and byte-level text: file checks, the train/validation split and the
// contiguous-window batches with their cursor.
#include "data/token_data.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/error.h"
#include "runtime/text_file.h"

namespace octet::data {
namespace {

// Shard tokens are read in place from the mapping, which is only right on a little-endian host.
static_assert(std::endian::native == std::endian::little, "token shards are little-endian");

int32_t load_le_i32(const uint8_t* p) {
  const uint32_t v = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                     static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
  return static_cast<int32_t>(v);
}

bool has_glob_characters(const std::string& pattern) {
  return pattern.find_first_of("*?[") != std::string::npos;
}

// Tokens [begin, end) of `from` as a segment of their own.
Segment sub_segment(const Segment& from, const std::string& file, int64_t begin, int64_t end) {
  return {from.owner, from.tokens + begin, end - begin,
          file + " tokens [" + std::to_string(begin) + ", " + std::to_string(end) + ")"};
}

// The first `cut` tokens of the concatenated `stream` go to train, the rest to validation.
void split_stream(const std::vector<Segment>& stream, const std::vector<std::string>& files,
                  int64_t cut, std::vector<Segment>& train, std::vector<Segment>& validation) {
  int64_t offset = 0;
  for (size_t i = 0; i < stream.size(); ++i) {
    const Segment& s = stream[i];
    const int64_t local = std::clamp<int64_t>(cut - offset, 0, s.size);
    if (local == s.size) {
      train.push_back(s);
    } else if (local == 0) {
      validation.push_back(s);
    } else {
      train.push_back(sub_segment(s, files[i], 0, local));
      validation.push_back(sub_segment(s, files[i], local, s.size));
    }
    offset += s.size;
  }
}

// Tokens held out at the end of a stream of `total`: the fraction, at least one.
int64_t held_out_tokens(int64_t total, double val_fraction) {
  OCTET_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "validation fraction ", val_fraction,
              " must be in (0, 1)");
  return std::max<int64_t>(1, std::llround(static_cast<double>(total) * val_fraction));
}

}  // namespace

// ---- shards ----

TokenShard::TokenShard(std::string path, void* map, size_t map_bytes, int64_t size)
    : path_(std::move(path)),
      map_(map),
      map_bytes_(map_bytes),
      tokens_(
          reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(map) + kShardHeaderBytes)),
      size_(size) {}

TokenShard::~TokenShard() { ::munmap(map_, map_bytes_); }

std::shared_ptr<const TokenShard> TokenShard::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OCTET_CHECK(fd >= 0, "cannot open token shard ", path, ": ", std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const auto file_bytes = static_cast<int64_t>(st.st_size);
  void* map = MAP_FAILED;
  int map_errno = 0;
  if (stat_ok && S_ISREG(st.st_mode) && file_bytes >= kShardHeaderBytes) {
    map = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
    map_errno = errno;
  }
  ::close(fd);  // a mapping keeps the file open by itself
  OCTET_CHECK(stat_ok, "token shard ", path, ": stat failed");
  OCTET_CHECK(S_ISREG(st.st_mode), "token shard ", path, " is not a regular file");
  OCTET_CHECK(file_bytes >= kShardHeaderBytes, "token shard ", path, " is ", file_bytes,
              " bytes, shorter than the ", kShardHeaderBytes, "-byte header (", kShardHeaderInts,
              " int32)");
  OCTET_CHECK(map != MAP_FAILED, "token shard ", path, ": mmap failed: ", std::strerror(map_errno));

  const auto* header = static_cast<const uint8_t*>(map);
  const int32_t magic = load_le_i32(header);
  const int32_t version = load_le_i32(header + 4);
  const int32_t count = load_le_i32(header + 8);
  // Owned from here on, so a failed check below unmaps.
  std::shared_ptr<const TokenShard> shard(
      new TokenShard(path, map, static_cast<size_t>(file_bytes), count));
  OCTET_CHECK(magic == kShardMagic, "token shard ", path, ": header[0] (magic) is ", magic,
              ", expected ", kShardMagic, " (not an llm.c token shard)");
  OCTET_CHECK(version == kShardVersion, "token shard ", path, ": header[1] (version) is ", version,
              ", expected ", kShardVersion, " (uint16 tokens)");
  OCTET_CHECK(count >= 0, "token shard ", path, ": header[2] (token count) is ", count,
              ", expected a count >= 0");
  const int64_t expected_bytes = kShardHeaderBytes + 2 * static_cast<int64_t>(count);
  OCTET_CHECK(file_bytes == expected_bytes, "token shard ", path, ": header[2] (token count) is ",
              count, ", so the file should be ", kShardHeaderBytes, " + 2 * ", count, " = ",
              expected_bytes, " bytes, but it is ", file_bytes,
              " bytes (truncated or not a shard)");
  return shard;
}

void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  OCTET_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX), "token shard ", path, ": ",
              tokens.size(), " tokens do not fit the int32 count of the header");
  std::vector<int32_t> header(static_cast<size_t>(kShardHeaderInts), 0);
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  OCTET_CHECK(out.good(), "cannot write token shard ", path, ": ", std::strerror(errno));
  out.write(reinterpret_cast<const char*>(header.data()), kShardHeaderBytes);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  out.close();
  OCTET_CHECK(!out.fail(), "cannot write token shard ", path, ": the write failed");
}

void check_stream_vocab(const Tokenizer& tokenizer, std::string_view use) {
  OCTET_CHECK(tokenizer.vocab_size() <= kMaxStreamVocab, "the vocabulary of ", tokenizer.describe(),
              " has ", tokenizer.vocab_size(), " ids, more than the uint16 token ids of ", use,
              " can hold (at most ", kMaxStreamVocab, ")");
}

std::vector<std::string> expand_shard_paths(const std::string& pattern) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::error_code ec;
  if (fs::is_directory(pattern, ec)) {
    for (const auto& entry : fs::directory_iterator(pattern, ec)) {
      if (entry.path().extension() == ".bin") paths.push_back(entry.path().string());
    }
    OCTET_CHECK(!paths.empty(), "shard directory ", pattern, " holds no *.bin file");
  } else if (has_glob_characters(pattern)) {
    glob_t matches{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
    for (size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i)
      paths.emplace_back(matches.gl_pathv[i]);
    ::globfree(&matches);
    OCTET_CHECK(!paths.empty(), "no token shard matches the pattern ", pattern);
  } else {
    OCTET_CHECK(fs::exists(pattern, ec), "token shard ", pattern, " does not exist");
    paths.push_back(pattern);
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// ---- batches from segments ----

void TokenStreamDataset::set_segments(std::vector<Segment> train, std::vector<Segment> validation) {
  OCTET_ASSERT(!train.empty() && !validation.empty());
  train_ = std::move(train);
  validation_ = std::move(validation);
}

int64_t TokenStreamDataset::tokens_in(Split split) const {
  int64_t total = 0;
  for (const Segment& s : segments(split)) total += s.size;
  return total;
}

Batch TokenStreamDataset::next_rows(Split split, int64_t batch_size, int64_t seq_len, int64_t first,
                                    int64_t rows) {
  OCTET_CHECK(batch_size > 0 && seq_len > 0, "batch shape (", batch_size, ", ", seq_len,
              ") must be positive");
  detail::check_rows(batch_size, first, rows);
  const std::vector<Segment>& segs = segments(split);
  const int64_t step = batch_size * seq_len;
  const int64_t need = step + 1;  // the last target is the token after the window
  Cursor& c = cursor(split);
  // Visit each segment at most once, starting at the cursor's, for one that fits a batch.
  for (size_t tries = 0; tries <= segs.size(); ++tries) {
    if (static_cast<int64_t>(c.position) + need <= segs[c.segment].size) break;
    OCTET_CHECK(tries < segs.size(), "the ", split_name(split), " data of ", describe(),
                " has no segment of ", need, " tokens for a batch of ", batch_size, " x ", seq_len,
                " (+1 for the last target; the largest holds ",
                std::max_element(
                    segs.begin(), segs.end(),
                    [](const Segment& a, const Segment& b) { return a.size < b.size; })
                    ->size,
                "): lower data batch size or sequence length, or use more data");
    c.segment = (c.segment + 1) % segs.size();
    c.position = 0;
  }
  // Row j of the batch starts j * seq_len tokens into the window, as in one process's batch.
  const uint16_t* window = segs[c.segment].tokens + c.position + first * seq_len;
  Batch batch = detail::empty_batch(rows, seq_len);
  int32_t* inputs = batch.inputs.data_as<int32_t>();    // (rows, T)
  int32_t* targets = batch.targets.data_as<int32_t>();  // (rows, T)
  for (int64_t i = 0; i < rows * seq_len; ++i) {
    inputs[i] = window[i];
    targets[i] = window[i + 1];
  }
  c.position += static_cast<uint64_t>(step);
  return batch;
}

int64_t TokenStreamDataset::batches_per_pass(Split split, int64_t batch_size,
                                             int64_t seq_len) const {
  OCTET_CHECK(batch_size > 0 && seq_len > 0, "batch shape (", batch_size, ", ", seq_len,
              ") must be positive");
  const int64_t step = batch_size * seq_len;
  int64_t count = 0;
  for (const Segment& s : segments(split)) {
    if (s.size >= step + 1) count += (s.size - 1) / step;
  }
  return count;
}

void TokenStreamDataset::check_cursor(Split split, const Cursor& cursor) const {
  const std::vector<Segment>& segs = segments(split);
  OCTET_CHECK(cursor.segment < segs.size() &&
                  cursor.position <= static_cast<uint64_t>(segs[cursor.segment].size),
              "data state: ", split_name(split), " cursor (segment ", cursor.segment, ", position ",
              cursor.position, ") does not fit ", describe(), " (", segs.size(),
              " segments): the checkpoint was made with other data");
}

// ---- text ----

TextDataset::TextDataset(const std::string& path, double val_fraction, Tokenizer tokenizer)
    : path_(path), tokenizer_(std::move(tokenizer)) {
  check_stream_vocab(tokenizer_, "text data");
  const std::string text = read_file_text(path, "text file");
  const int64_t bad = first_invalid_utf8(text);
  OCTET_CHECK(bad < 0, "text file ", path, " is not valid UTF-8: byte 0x", std::hex,
              static_cast<int>(static_cast<uint8_t>(text[static_cast<size_t>(bad < 0 ? 0 : bad)])),
              std::dec, " at offset ", bad);
  bytes_ = static_cast<int64_t>(text.size());

  auto tokens = std::make_shared<std::vector<uint16_t>>();
  int64_t cut = 0;
  if (tokenizer_.kind() == TokenizerKind::kBytes) {
    OCTET_CHECK(bytes_ >= 4, "text file ", path, " has ", bytes_,
                " bytes: too few for a train and a validation split of 2 bytes each");
    cut = bytes_ - held_out_tokens(bytes_, val_fraction);
    // Move the cut off UTF-8 continuation bytes so neither split starts mid-character.
    while (cut < bytes_ && (static_cast<uint8_t>(text[static_cast<size_t>(cut)]) & 0xC0) == 0x80) {
      ++cut;
    }
    tokens->resize(text.size());
    for (size_t i = 0; i < text.size(); ++i) (*tokens)[i] = static_cast<uint8_t>(text[i]);
  } else {
    const std::vector<int32_t> ids = tokenizer_.encode(text);
    const auto n = static_cast<int64_t>(ids.size());
    OCTET_CHECK(n >= 4, "text file ", path, " encodes to ", n, " tokens with ",
                tokenizer_.describe(),
                ": too few for a train and a validation split of 2 tokens each");
    tokens->assign(ids.begin(), ids.end());  // every id < 65536 (check_stream_vocab)
    cut = n - held_out_tokens(n, val_fraction);
  }
  const auto n = static_cast<int64_t>(tokens->size());
  cut = std::clamp<int64_t>(cut, 2, n - 2);
  const Segment whole{tokens, tokens->data(), n, path};
  std::vector<Segment> train, validation;
  split_stream({whole}, {path}, cut, train, validation);
  set_segments(std::move(train), std::move(validation));
}

Metric TextDataset::metric() const {
  return tokenizer_.kind() == TokenizerKind::kBytes ? Metric::kBitsPerByte : Metric::kLoss;
}

std::string TextDataset::describe() const {
  const int64_t train = tokens_in(Split::kTrain), validation = tokens_in(Split::kValidation);
  if (tokenizer_.kind() == TokenizerKind::kBytes) {
    return "text " + path_ + " (" + std::to_string(bytes_) +
           " bytes as byte tokens: " + std::to_string(train) + " train, " +
           std::to_string(validation) + " validation)";
  }
  return fmt::format(
      "text {} ({} bytes as {} tokens of {}, {:.2f} bytes per token: {} train, {} validation)",
      path_, bytes_, train + validation, tokenizer_.describe(),
      static_cast<double>(bytes_) / static_cast<double>(train + validation), train, validation);
}

std::vector<int32_t> TextDataset::encode(std::string_view text) const {
  return tokenizer_.encode(text);
}

std::string TextDataset::decode(const std::vector<int32_t>& tokens) const {
  return tokenizer_.decode(tokens);
}

// ---- shards ----

ShardDataset::ShardDataset(const std::string& pattern, const std::string& val_pattern,
                           double val_fraction, std::optional<Tokenizer> tokenizer)
    : pattern_(pattern), tokenizer_(std::move(tokenizer)) {
  auto open_all = [this](const std::string& p, std::vector<std::string>& files) {
    files = expand_shard_paths(p);
    std::vector<Segment> segs;
    for (const std::string& file : files) {
      std::shared_ptr<const TokenShard> shard = TokenShard::open(file);
      const uint16_t* begin = shard->tokens();
      const int64_t n = shard->size();
      if (n > 0)
        vocab_size_ = std::max<int64_t>(vocab_size_, *std::max_element(begin, begin + n) + 1);
      segs.push_back({shard, begin, n, file});
    }
    return segs;
  };
  std::vector<std::string> files, val_files;
  std::vector<Segment> stream = open_all(pattern, files);
  files_ = static_cast<int64_t>(files.size());
  std::vector<Segment> train, validation;
  if (!val_pattern.empty()) {
    train = std::move(stream);
    validation = open_all(val_pattern, val_files);
    files_ += static_cast<int64_t>(val_files.size());
  } else {
    int64_t total = 0;
    for (const Segment& s : stream) total += s.size;
    OCTET_CHECK(total >= 4, "token shards ", pattern, " hold ", total,
                " tokens: too few for a train and a validation split of 2 tokens each");
    const int64_t cut =
        std::clamp<int64_t>(total - held_out_tokens(total, val_fraction), 2, total - 2);
    split_stream(stream, files, cut, train, validation);
  }
  auto drop_empty = [](std::vector<Segment>& segs) {
    std::erase_if(segs, [](const Segment& s) { return s.size == 0; });
  };
  drop_empty(train);
  drop_empty(validation);
  OCTET_CHECK(!train.empty(), "token shards ", pattern, " hold no tokens");
  OCTET_CHECK(!validation.empty(), "validation token shards ", val_pattern, " hold no tokens");
  if (tokenizer_) {
    OCTET_CHECK(vocab_size_ <= tokenizer_->vocab_size(), "token shards ", pattern,
                val_pattern.empty() ? "" : " and " + val_pattern, " hold token id ",
                vocab_size_ - 1, ", outside the vocabulary of ", tokenizer_->describe(), " (",
                tokenizer_->vocab_size(), " ids): were they made with another tokenizer?");
    vocab_size_ = tokenizer_->vocab_size();
  }
  set_segments(std::move(train), std::move(validation));
}

std::string ShardDataset::describe() const {
  return "token shards " + pattern_ + " (" + std::to_string(files_) + " files, " +
         std::to_string(tokens_in(Split::kTrain)) + " train and " +
         std::to_string(tokens_in(Split::kValidation)) + " validation tokens, vocab " +
         std::to_string(vocab_size_) + (tokenizer_ ? " of " + tokenizer_->describe() : "") + ")";
}

std::vector<int32_t> ShardDataset::encode(std::string_view text) const {
  if (tokenizer_) return tokenizer_->encode(text);
  OCTET_FAIL("token shards carry no tokenizer, so text cannot be turned into their token ids");
}

std::string ShardDataset::decode(const std::vector<int32_t>& tokens) const {
  if (tokenizer_) return tokenizer_->decode(tokens);
  std::string text;
  for (int32_t t : tokens) {
    text += '[';
    text += std::to_string(t);
    text += ']';
  }
  return text;
}

}  // namespace octet::data
