// Digit sorting and addition problems drawn from a counter-based stream per split, the held-out
// partition, batch layout with answer-only targets, and exact-match scoring.
#include "data/task_data.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/rng.h"

namespace octet::data {
namespace {

// The SplitMix64 finaliser: a cheap, well-mixed 64-bit hash step.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr uint64_t kTrainStream = 0x747261696eull;       // "train"
constexpr uint64_t kHeldOutStream = 0x76616cull;         // "val"
constexpr uint64_t kPartitionKey = 0x686f6c646f7574ull;  // "holdout"
// Each split's draw is rejected with probability 1 - 1/kHeldOutEvery at most; 2000 rejections in
// a row (probability 0.9^2000) means a bug, not bad luck.
constexpr int kMaxDraws = 2000;
constexpr size_t kMaxMistakes = 5;

int32_t random_digit(Generator& gen) { return static_cast<int32_t>(gen.next_u32() % 10); }

std::string text_of(const std::vector<int32_t>& tokens) {
  std::string text;
  for (int32_t t : tokens) {
    text += t >= 0 && t < static_cast<int32_t>(kTaskAlphabet.size())
                ? kTaskAlphabet[static_cast<size_t>(t)]
                : '?';
  }
  return text;
}

}  // namespace

AlgorithmicTask::AlgorithmicTask(TaskKind kind, int64_t digits, uint64_t seed)
    : kind_(kind), digits_(digits), seed_(seed) {
  // Lower bounds keep the held-out set non-empty (sort: 1000 problems, add: 10^4); upper bounds
  // keep sums inside int64 and sequences short.
  if (kind == TaskKind::kSort) {
    OCTET_CHECK(digits >= 3 && digits <= 16, "task sort: digits ", digits, " must be in [3, 16]");
  } else {
    OCTET_CHECK(digits >= 2 && digits <= 8, "task add: digits ", digits, " must be in [2, 8]");
  }
}

int64_t AlgorithmicTask::prompt_len() const {
  return kind_ == TaskKind::kSort ? digits_ + 1 : 2 * digits_ + 2;
}

int64_t AlgorithmicTask::answer_len() const {
  return kind_ == TaskKind::kSort ? digits_ : digits_ + 1;
}

bool AlgorithmicTask::is_held_out(const std::vector<int32_t>& prompt) const {
  uint64_t h = mix(seed_ ^ kPartitionKey);
  for (int32_t t : prompt) h = mix(h ^ static_cast<uint64_t>(static_cast<uint32_t>(t)));
  return h % kHeldOutEvery == 0;
}

std::vector<int32_t> AlgorithmicTask::solve(const std::vector<int32_t>& prompt) const {
  OCTET_CHECK(static_cast<int64_t>(prompt.size()) == prompt_len(), "task prompt \"",
              text_of(prompt), "\" has ", prompt.size(), " tokens, expected ", prompt_len());
  const auto n = static_cast<size_t>(digits_);
  for (size_t i = 0; i < prompt.size(); ++i) {
    const bool digit_slot = kind_ == TaskKind::kSort ? i < n : (i < n || (i > n && i < 2 * n + 1));
    OCTET_CHECK(!digit_slot || (prompt[i] >= 0 && prompt[i] <= 9), "task prompt \"",
                text_of(prompt), "\": position ", i, " must be a digit");
  }
  if (kind_ == TaskKind::kSort) {
    OCTET_CHECK(prompt[n] == kTokenSorted, "task prompt \"", text_of(prompt), "\" must end in '>'");
    std::vector<int32_t> answer(prompt.begin(), prompt.begin() + digits_);
    std::sort(answer.begin(), answer.end());
    return answer;
  }
  OCTET_CHECK(prompt[n] == kTokenPlus && prompt[2 * n + 1] == kTokenEquals, "task prompt \"",
              text_of(prompt), "\" must read <digits>+<digits>=");
  // Schoolbook addition from the least-significant end, which is also the order the answer is
  // written in: each answer digit then depends only on digits already seen and one carry.
  std::vector<int32_t> answer;
  int32_t carry = 0;
  for (size_t k = 0; k < n; ++k) {
    const int32_t sum = prompt[n - 1 - k] + prompt[2 * n - k] + carry;
    answer.push_back(sum % 10);
    carry = sum / 10;
  }
  answer.push_back(carry);
  return answer;
}

TaskExample AlgorithmicTask::example(Split split, uint64_t index) const {
  const bool held_out = split == Split::kValidation;
  Generator gen(mix(mix(seed_ ^ (held_out ? kHeldOutStream : kTrainStream)) ^ index));
  const auto n = static_cast<size_t>(digits_);
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len()));
  for (int draw = 0; draw < kMaxDraws; ++draw) {
    if (kind_ == TaskKind::kSort) {
      for (size_t i = 0; i < n; ++i) prompt[i] = random_digit(gen);
      prompt[n] = kTokenSorted;
    } else {
      for (size_t i = 0; i < n; ++i) prompt[i] = random_digit(gen);
      prompt[n] = kTokenPlus;
      for (size_t i = 0; i < n; ++i) prompt[n + 1 + i] = random_digit(gen);
      prompt[2 * n + 1] = kTokenEquals;
    }
    if (is_held_out(prompt) == held_out) return {prompt, solve(prompt)};
  }
  OCTET_FAIL("task ", task_kind_name(kind_), ": no ", split_name(split), " problem in ", kMaxDraws,
             " draws for example ", index);
}

Batch AlgorithmicTask::next_rows(Split split, int64_t batch_size, int64_t seq_len, int64_t first,
                                 int64_t rows) {
  OCTET_CHECK(batch_size > 0, "batch size ", batch_size, " must be positive");
  OCTET_CHECK(seq_len >= natural_seq_len(), "task ", task_kind_name(kind_), " with ", digits_,
              " digits needs a sequence length of at least ", natural_seq_len(), " (prompt ",
              prompt_len(), " + answer ", answer_len(), " - 1), got ", seq_len);
  detail::check_rows(batch_size, first, rows);
  Batch batch = detail::empty_batch(rows, seq_len);
  int32_t* inputs = batch.inputs.data_as<int32_t>();    // (rows, T)
  int32_t* targets = batch.targets.data_as<int32_t>();  // (rows, T)
  Cursor& c = cursor(split);
  const int64_t answer_from = prompt_len() - 1;  // the input position that predicts answer[0]
  for (int64_t b = 0; b < rows; ++b) {
    const TaskExample ex = example(split, c.position + static_cast<uint64_t>(first + b));
    std::vector<int32_t> sequence = ex.prompt;
    sequence.insert(sequence.end(), ex.answer.begin(), ex.answer.end());
    const auto used = static_cast<int64_t>(sequence.size()) - 1;
    int32_t* in = inputs + b * seq_len;
    int32_t* out = targets + b * seq_len;
    for (int64_t t = 0; t < seq_len; ++t) {
      const bool inside = t < used;
      in[t] = inside ? sequence[static_cast<size_t>(t)] : kTokenPad;
      out[t] = inside && t >= answer_from ? sequence[static_cast<size_t>(t + 1)] : kIgnoreIndex;
    }
  }
  c.position += static_cast<uint64_t>(batch_size);
  return batch;
}

ExactMatch AlgorithmicTask::evaluate(int64_t count, int64_t batch_size, const GenerateFn& generate,
                                     int64_t share, int64_t shares) const {
  OCTET_CHECK(count > 0 && batch_size > 0, "exact-match evaluation of ", count,
              " examples in batches of ", batch_size, ": both must be positive");
  OCTET_CHECK(shares >= 1 && share >= 0 && share < shares, "exact-match evaluation: share ", share,
              " of ", shares, " is not one of them");
  ExactMatch result;
  const int64_t p = prompt_len(), a = answer_len();
  for (int64_t first = 0; first < count; first += batch_size) {
    if ((first / batch_size) % shares != share) continue;
    const int64_t n = std::min(batch_size, count - first);
    std::vector<TaskExample> examples;
    Tensor prompts = Tensor::empty({n, p}, DType::kI32);  // (n, P)
    int32_t* dst = prompts.data_as<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      examples.push_back(example(Split::kValidation, static_cast<uint64_t>(first + i)));
      std::copy(examples.back().prompt.begin(), examples.back().prompt.end(), dst + i * p);
    }
    Tensor answers = generate(prompts, a);
    OCTET_CHECK(
        answers.defined() && answers.dtype() == DType::kI32 && answers.shape() == (Shape{n, a}),
        "exact-match evaluation: the generator must return (", n, ", ", a, ") i32 answers, got ",
        answers);
    if (!answers.device().is_cpu()) answers = answers.to(Device::cpu());
    const int32_t* got = answers.data_as<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<int32_t> row(got + i * a, got + (i + 1) * a);
      const TaskExample& ex = examples[static_cast<size_t>(i)];
      if (row == ex.answer) {
        ++result.correct;
      } else if (result.mistakes.size() < kMaxMistakes) {
        result.mistakes.push_back(text_of(ex.prompt) + " gave " + text_of(row) + ", want " +
                                  text_of(ex.answer));
      }
    }
    result.total += n;
  }
  return result;
}

std::vector<int32_t> AlgorithmicTask::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ' ') continue;
    const size_t id = kTaskAlphabet.find(text[i]);
    OCTET_CHECK(id != std::string_view::npos, "character '", text[i], "' at offset ", i, " of \"",
                text, "\" is not in the task vocabulary \"", kTaskAlphabet, "\"");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::string AlgorithmicTask::decode(const std::vector<int32_t>& tokens) const {
  return text_of(tokens);
}

std::string AlgorithmicTask::describe() const {
  const TaskExample ex = example(Split::kTrain, 0);
  std::string what;
  if (kind_ == TaskKind::kSort) {
    what = "sort " + std::to_string(digits_) + " digits ascending";
  } else {
    what = "add two " + std::to_string(digits_) +
           "-digit numbers, the sum written least-significant digit first";
  }
  return "task " + std::string(task_kind_name(kind_)) + " (seed " + std::to_string(seed_) +
         "): " + what + ", e.g. " + text_of(ex.prompt) + text_of(ex.answer) + "; sequence " +
         std::to_string(natural_seq_len()) + ", loss on the " + std::to_string(answer_len()) +
         " answer tokens; 1 in " + std::to_string(kHeldOutEvery) + " problems held out";
}

void AlgorithmicTask::check_cursor(Split split, const Cursor& cursor) const {
  OCTET_CHECK(cursor.segment == 0, "data state: ", split_name(split), " cursor segment ",
              cursor.segment, " does not fit ", describe(),
              " (a task has one stream): the checkpoint was made with other data");
}

}  // namespace octet::data
