// The command line in-process, for the tools tests: run_octet with captured streams, the tiny
// training run they share, and the check that an error is one clear line.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "tools/commands.h"

namespace octet::cli::test_cli {

struct Outcome {
  int code;
  std::string out, err;
};

inline Outcome octet(const Args& args) {
  std::ostringstream out, err;
  const int code = run_octet(args, out, err);
  return {code, out.str(), err.str()};
}

// A one-layer model on the 4-digit task for 6 steps, as command-line words.
inline Args tiny_train(const std::string& dir, const Args& more = {}) {
  Args a = {"train", "--quiet",
            "--out", dir,
            "--set", "model.n_layer=1",
            "--set", "model.d_model=32",
            "--set", "model.n_head=2",
            "--set", "data.task_digits=4",
            "--set", "training.steps=6",
            "--set", "training.batch_size=8",
            "--set", "training.eval_examples=16",
            "--set", "training.checkpoint_interval=3",
            "--set", "schedule.warmup_steps=2"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// One line, saying who failed, with no source locations or library exception tags.
inline void expect_one_clear_line(const Outcome& r, const std::string& command,
                                  const std::string& says) {
  using ::testing::HasSubstr;
  using ::testing::Not;
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, ::testing::StartsWith("octet " + command + ": error: "));
  EXPECT_THAT(r.err, HasSubstr(says));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, ::testing::AllOf(Not(HasSubstr(".cpp:")), Not(HasSubstr("json.exception"))))
      << r.err;
}

}  // namespace octet::cli::test_cli
