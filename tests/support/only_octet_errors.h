// The hostile-input check of the runtime's and the tools' parsers: a parse either succeeds or
// ends as octet::Error naming what was wrong, never as another exception.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <typeinfo>

#include "runtime/error.h"

namespace octet::test {

enum class OneLine { kNo, kYes };

// Calls `fn` and expects it to succeed or to throw octet::Error whose message holds `names`
// (and, with OneLine::kYes, is one line).
template <typename Fn>
void only_octet_errors(const std::string& input, const std::string& names, Fn fn,
                       OneLine one_line) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(names)) << "input: " << input;
    if (one_line == OneLine::kYes) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "input " << input << " escaped as " << typeid(e).name() << ": " << e.what();
  }
}

}  // namespace octet::test
