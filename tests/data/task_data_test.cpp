// The built-in algorithmic tasks: determinism, answers checked by an independent computation,
// answer-only targets, disjoint held-out problems, resumable cursors and exact-match scoring.
#include "data/task_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "data/token_data.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace octet::data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using test::error_of;

std::vector<int32_t> values(const Tensor& t) {
  const int32_t* p = t.data_as<int32_t>();
  return {p, p + t.numel()};
}

// The answer worked out from the prompt's text, independently of the task's own code: sorting by
// counting digits, addition through integers.
std::string expected_answer(const std::string& prompt) {
  if (prompt.back() == '>') {
    std::array<int, 10> count{};
    for (char c : prompt.substr(0, prompt.size() - 1)) ++count[static_cast<size_t>(c - '0')];
    std::string sorted;
    for (int d = 0; d < 10; ++d) sorted += std::string(static_cast<size_t>(count[d]), '0' + d);
    return sorted;
  }
  const size_t plus = prompt.find('+');
  const size_t digits = plus;
  const int64_t a = std::stoll(prompt.substr(0, plus));
  const int64_t b = std::stoll(prompt.substr(plus + 1, digits));
  std::string sum = std::to_string(a + b);
  sum = std::string(digits + 1 - sum.size(), '0') + sum;
  return {sum.rbegin(), sum.rend()};  // least-significant digit first
}

std::string text(const AlgorithmicTask& task, const std::vector<int32_t>& tokens) {
  return task.decode(tokens);
}

TEST(AlgorithmicTask, ShapesAndVocabulary) {
  const AlgorithmicTask sort(TaskKind::kSort, 6, 1);
  EXPECT_EQ(sort.prompt_len(), 7);
  EXPECT_EQ(sort.answer_len(), 6);
  EXPECT_EQ(sort.natural_seq_len(), 12);
  EXPECT_EQ(sort.vocab_size(), 16);
  EXPECT_EQ(sort.metric(), Metric::kExactMatch);
  EXPECT_EQ(sort.batches_per_pass(Split::kTrain, 8, 12), -1);
  const AlgorithmicTask add(TaskKind::kAdd, 2, 1);
  EXPECT_EQ(add.prompt_len(), 6);  // "47+85="
  EXPECT_EQ(add.answer_len(), 3);
  EXPECT_EQ(add.natural_seq_len(), 8);
  EXPECT_EQ(sort.encode("3 1 4 > 1 3 4"), (std::vector<int32_t>{3, 1, 4, 12, 1, 3, 4}));
  EXPECT_EQ(add.encode("47+85="), (std::vector<int32_t>{4, 7, 10, 8, 5, 11}));
  EXPECT_EQ(add.decode({4, 7, 10, 8, 5, 11, 13, 15}), "47+85=.?");
  EXPECT_THAT(error_of([&] { add.encode("4x"); }),
              HasSubstr("character 'x' at offset 1 of \"4x\" is not in the task vocabulary"));
  EXPECT_THAT(error_of([] { AlgorithmicTask(TaskKind::kSort, 2, 1); }),
              HasSubstr("task sort: digits 2 must be in [3, 16]"));
  EXPECT_THAT(error_of([] { AlgorithmicTask(TaskKind::kAdd, 9, 1); }),
              HasSubstr("task add: digits 9 must be in [2, 8]"));
}

TEST(AlgorithmicTask, ExamplesAreCorrect) {
  for (const auto& [kind, digits] :
       {std::pair{TaskKind::kSort, int64_t{5}}, std::pair{TaskKind::kSort, int64_t{8}},
        std::pair{TaskKind::kAdd, int64_t{2}}, std::pair{TaskKind::kAdd, int64_t{3}}}) {
    const AlgorithmicTask task(kind, digits, 42);
    int carries = 0;
    for (Split split : {Split::kTrain, Split::kValidation}) {
      for (uint64_t i = 0; i < 500; ++i) {
        const TaskExample ex = task.example(split, i);
        const std::string prompt = text(task, ex.prompt);
        ASSERT_EQ(text(task, ex.answer), expected_answer(prompt)) << prompt;
        if (kind == TaskKind::kAdd && text(task, ex.answer).back() == '1') ++carries;
      }
    }
    if (kind == TaskKind::kAdd) {
      EXPECT_GT(carries, 100) << "sums that carry out must occur";
    }
  }
  const AlgorithmicTask add(TaskKind::kAdd, 2, 1);
  EXPECT_EQ(add.solve(add.encode("99+99=")), add.encode("891"));  // 198 reversed
  EXPECT_EQ(add.solve(add.encode("05+07=")), add.encode("210"));  // 12 reversed
  EXPECT_THAT(error_of([&] { add.solve(add.encode("99+9=")); }),
              HasSubstr("has 5 tokens, expected 6"));
  EXPECT_THAT(error_of([&] { add.solve(add.encode("99=99+")); }),
              HasSubstr("must read <digits>+<digits>="));
}

TEST(AlgorithmicTask, SameSeedSameBatchesOtherSeedOthers) {
  AlgorithmicTask a(TaskKind::kSort, 6, 7), b(TaskKind::kSort, 6, 7), c(TaskKind::kSort, 6, 8);
  for (int k = 0; k < 3; ++k) {
    const Batch x = a.next_batch(Split::kTrain, 16, 12);
    const Batch y = b.next_batch(Split::kTrain, 16, 12);
    const Batch z = c.next_batch(Split::kTrain, 16, 12);
    EXPECT_EQ(values(x.inputs), values(y.inputs));
    EXPECT_EQ(values(x.targets), values(y.targets));
    EXPECT_NE(values(x.inputs), values(z.inputs));
  }
  // Consecutive batches are different problems.
  EXPECT_NE(values(a.next_batch(Split::kTrain, 16, 12).inputs),
            values(a.next_batch(Split::kTrain, 16, 12).inputs));
}

TEST(AlgorithmicTask, TargetsCountOnlyTheAnswer) {
  AlgorithmicTask task(TaskKind::kAdd, 2, 3);
  const int64_t batch = 4, seq = 11;  // 3 positions longer than the task needs
  const Batch b = task.next_batch(Split::kTrain, batch, seq);
  const std::vector<int32_t> in = values(b.inputs), out = values(b.targets);
  for (int64_t r = 0; r < batch; ++r) {
    const TaskExample ex = task.example(Split::kTrain, static_cast<uint64_t>(r));
    std::vector<int32_t> sequence = ex.prompt;  // 6 prompt + 3 answer tokens
    sequence.insert(sequence.end(), ex.answer.begin(), ex.answer.end());
    for (int64_t t = 0; t < seq; ++t) {
      const size_t i = static_cast<size_t>(r * seq + t);
      SCOPED_TRACE("row " + std::to_string(r) + " position " + std::to_string(t));
      if (t < 8) {
        EXPECT_EQ(in[i], sequence[static_cast<size_t>(t)]);
      } else {
        EXPECT_EQ(in[i], kTokenPad);
      }
      // Inputs 5, 6, 7 ("=", answer[0], answer[1]) predict answer[0], answer[1], answer[2].
      if (t >= 5 && t < 8) {
        EXPECT_EQ(out[i], ex.answer[static_cast<size_t>(t - 5)]);
      } else {
        EXPECT_EQ(out[i], kIgnoreIndex);
      }
    }
  }
  EXPECT_THAT(error_of([&] { task.next_batch(Split::kTrain, 2, 7); }),
              HasSubstr("needs a sequence length of at least 8 (prompt 6 + answer 3 - 1), got 7"));
}

TEST(AlgorithmicTask, HeldOutProblemsNeverAppearInTraining) {
  for (const auto& [kind, digits] :
       {std::pair{TaskKind::kSort, int64_t{5}}, std::pair{TaskKind::kAdd, int64_t{2}}}) {
    const AlgorithmicTask task(kind, digits, 11);
    std::set<std::vector<int32_t>> train, held_out;
    for (uint64_t i = 0; i < 20000; ++i) {
      const TaskExample ex = task.example(Split::kTrain, i);
      EXPECT_FALSE(task.is_held_out(ex.prompt));
      train.insert(ex.prompt);
    }
    for (uint64_t i = 0; i < 2000; ++i) {
      const TaskExample ex = task.example(Split::kValidation, i);
      EXPECT_TRUE(task.is_held_out(ex.prompt));
      held_out.insert(ex.prompt);
      EXPECT_EQ(train.count(ex.prompt), 0u) << text(task, ex.prompt) << " was trained on";
    }
    // Addition has 10^4 problems, so 20000 draws must have covered most of the 90% in training
    // and the held-out stream must sit on the other ~1000 (about 1 in 10).
    if (kind == TaskKind::kAdd) {
      EXPECT_GT(train.size(), 7500u);
      EXPECT_GT(held_out.size(), 700u);
      EXPECT_LT(held_out.size(), 1300u);
    }
  }
  // A different seed holds out different problems.
  const AlgorithmicTask a(TaskKind::kSort, 6, 1), b(TaskKind::kSort, 6, 2);
  int differ = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    const std::vector<int32_t> p = a.example(Split::kValidation, i).prompt;
    differ += a.is_held_out(p) != b.is_held_out(p);
  }
  EXPECT_GT(differ, 150);
}

TEST(AlgorithmicTask, StateRestoresTheSameBatches) {
  AlgorithmicTask first(TaskKind::kSort, 6, 5);
  for (int k = 0; k < 7; ++k) first.next_batch(Split::kTrain, 8, 12);
  first.next_batch(Split::kValidation, 4, 12);
  const DataState saved = first.state();
  EXPECT_EQ(saved.train, (Cursor{0, 56}));
  EXPECT_EQ(saved.validation, (Cursor{0, 4}));

  AlgorithmicTask resumed(TaskKind::kSort, 6, 5);
  resumed.set_state(decode_state(encode_state(saved)));
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(values(first.next_batch(Split::kTrain, 8, 12).inputs),
              values(resumed.next_batch(Split::kTrain, 8, 12).inputs));
  }
  EXPECT_EQ(values(first.next_batch(Split::kValidation, 4, 12).targets),
            values(resumed.next_batch(Split::kValidation, 4, 12).targets));
  // Rewinding validation replays the same held-out batch.
  AlgorithmicTask fresh(TaskKind::kSort, 6, 5);
  const Batch v0 = fresh.next_batch(Split::kValidation, 4, 12);
  fresh.next_batch(Split::kValidation, 4, 12);
  fresh.rewind(Split::kValidation);
  EXPECT_EQ(values(fresh.next_batch(Split::kValidation, 4, 12).inputs), values(v0.inputs));
  EXPECT_THAT(error_of([&] {
                fresh.set_state({{3, 0}, {0, 0}});
              }),
              HasSubstr("train cursor segment 3 does not fit task sort"));
}

TEST(AlgorithmicTask, ExactMatchScoresGeneratedAnswers) {
  const AlgorithmicTask task(TaskKind::kAdd, 2, 9);
  std::vector<int64_t> chunk_sizes;
  int64_t seen = 0;
  // Right on every example except each 4th, where the last digit is off by one.
  const GenerateFn mostly_right = [&](const Tensor& prompts, int64_t answer_len) {
    EXPECT_EQ(prompts.dim(), 2);
    EXPECT_EQ(prompts.size(1), 6);
    EXPECT_EQ(answer_len, 3);
    chunk_sizes.push_back(prompts.size(0));
    Tensor answers = Tensor::empty({prompts.size(0), answer_len}, DType::kI32);
    for (int64_t r = 0; r < prompts.size(0); ++r, ++seen) {
      const int32_t* p = prompts.data_as<int32_t>() + r * 6;
      std::string answer = expected_answer(task.decode({p, p + 6}));
      if (seen % 4 == 3) answer.back() = answer.back() == '1' ? '0' : '1';
      const std::vector<int32_t> ids = task.encode(answer);
      std::copy(ids.begin(), ids.end(), answers.data_as<int32_t>() + r * answer_len);
    }
    return answers;
  };
  const ExactMatch result = task.evaluate(100, 32, mostly_right);
  EXPECT_EQ(chunk_sizes, (std::vector<int64_t>{32, 32, 32, 4}));
  EXPECT_EQ(result.total, 100);
  EXPECT_EQ(result.correct, 75);
  EXPECT_DOUBLE_EQ(result.accuracy(), 0.75);
  ASSERT_EQ(result.mistakes.size(), 5u);
  EXPECT_THAT(result.mistakes[0],
              AllOf(HasSubstr(task.decode(task.example(Split::kValidation, 3).prompt)),
                    HasSubstr(" gave "), HasSubstr(", want ")));
  // The held-out set is fixed: training draws do not move it.
  AlgorithmicTask moved(TaskKind::kAdd, 2, 9);
  moved.next_batch(Split::kValidation, 50, 8);
  seen = 0;
  EXPECT_EQ(moved.evaluate(100, 32, mostly_right).correct, 75);

  const GenerateFn wrong_shape = [](const Tensor& prompts, int64_t) {
    return Tensor::zeros({prompts.size(0), 2}, DType::kI32);
  };
  EXPECT_THAT(error_of([&] { task.evaluate(10, 5, wrong_shape); }),
              HasSubstr("the generator must return (5, 3) i32 answers, got i32(5, 2)@cpu"));
}

TEST(AlgorithmicTask, DescribeShowsARealExample) {
  const AlgorithmicTask task(TaskKind::kSort, 6, 1);
  const TaskExample ex = task.example(Split::kTrain, 0);
  EXPECT_THAT(task.describe(),
              AllOf(HasSubstr("task sort (seed 1): sort 6 digits ascending"),
                    HasSubstr("e.g. " + task.decode(ex.prompt) + task.decode(ex.answer)),
                    HasSubstr("sequence 12, loss on the 6 answer tokens"),
                    HasSubstr("1 in 10 problems held out")));
  EXPECT_THAT(AlgorithmicTask(TaskKind::kAdd, 2, 1).describe(),
              HasSubstr("the sum written least-significant digit first"));
}

TEST(OpenDataset, EachKindAndClearErrors) {
  EXPECT_EQ(parse_data_kind("shards"), DataKind::kShards);
  EXPECT_EQ(parse_task_kind("add"), TaskKind::kAdd);
  EXPECT_EQ(data_kind_name(DataKind::kText), "text");
  EXPECT_EQ(task_kind_name(TaskKind::kSort), "sort");
  EXPECT_THAT(error_of([] { parse_data_kind("csv"); }),
              HasSubstr("unknown data kind \"csv\": expected task, text or shards"));
  EXPECT_THAT(error_of([] { parse_task_kind("mul"); }), HasSubstr("expected sort or add"));

  const auto task = open_dataset({});  // the defaults: sort 6 digits, seed 1
  EXPECT_THAT(task->describe(), HasSubstr("task sort (seed 1): sort 6 digits"));
  test::ScratchDir dir;
  test::write_file_bytes(dir.file("t.txt"), "some text to train on");
  DataOptions text;
  text.kind = DataKind::kText;
  text.path = dir.file("t.txt");
  EXPECT_EQ(open_dataset(text)->vocab_size(), 256);
  DataOptions shards;
  shards.kind = DataKind::kShards;
  write_token_shard(dir.file("s.bin"), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  shards.path = dir.file("s.bin");
  EXPECT_EQ(open_dataset(shards)->vocab_size(), 11);
  shards.path.clear();
  EXPECT_THAT(error_of([&] { open_dataset(shards); }), HasSubstr("needs a path or pattern"));
}

}  // namespace
}  // namespace octet::data
