// The check macros: what the message says (file:line, the parts, the condition), when the
// message is built, and the exception type; plus set_log_level's names.
#include "runtime/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "runtime/log.h"
#include "tests/support/test_util.h"

namespace octet {
namespace {

using ::testing::HasSubstr;

static_assert(std::is_base_of_v<std::runtime_error, Error>);

using test::error_of;

TEST(Error, CheckMessageHasFileLineAndParts) {
  int line = 0;
  const std::string message = error_of([&] {
    const int n = 50;
    line = __LINE__ + 1;
    OCTET_CHECK(n % 16 == 0, "last dim ", n, " must be a multiple of ", 16, " (", 2.5, ")");
  });
  EXPECT_EQ(message, "error_test.cpp:" + std::to_string(line) +
                         ": last dim 50 must be a multiple of 16 (2.5)");
}

TEST(Error, CheckPassesSilentlyAndBuildsNoMessage) {
  int conditions = 0, messages = 0;
  auto condition = [&](bool value) {
    ++conditions;
    return value;
  };
  auto part = [&] {
    ++messages;
    return "part";
  };
  EXPECT_NO_THROW(OCTET_CHECK(condition(true), part()));
  EXPECT_EQ(conditions, 1);
  EXPECT_EQ(messages, 0);  // the message costs nothing on the passing path
  EXPECT_THROW(OCTET_CHECK(condition(false), part()), Error);
  EXPECT_EQ(conditions, 2);  // the condition is evaluated exactly once
  EXPECT_EQ(messages, 1);
}

TEST(Error, CheckIsASingleStatement) {
  // do { } while (0): an unbraced if/else around it compiles and binds as written.
  int taken = 0;
  for (bool flag : {true, false}) {
    if (flag)
      OCTET_CHECK(true, "never");
    else
      ++taken;
  }
  EXPECT_EQ(taken, 1);
}

int fail_with(int code) { OCTET_FAIL("unsupported code ", code); }  // [[noreturn]]: no return

TEST(Error, FailAlwaysThrows) {
  const std::string message = error_of([] { fail_with(7); });
  EXPECT_THAT(message, HasSubstr("error_test.cpp:"));
  EXPECT_THAT(message, HasSubstr(": unsupported code 7"));
  EXPECT_THROW(OCTET_FAIL(""), Error);
}

TEST(Error, AssertNamesTheCondition) {
  const int x = 3;
  int line = __LINE__ + 1;
  std::string message = error_of([&] { OCTET_ASSERT(x > 5 && x != 4, "x is ", x); });
  EXPECT_EQ(message,
            "error_test.cpp:" + std::to_string(line) + ": internal error: x > 5 && x != 4: x is 3");
  // Without message parts there is no dangling ": ".
  line = __LINE__ + 1;
  message = error_of([&] { OCTET_ASSERT(x == 0); });
  EXPECT_EQ(message, "error_test.cpp:" + std::to_string(line) + ": internal error: x == 0");
  EXPECT_NO_THROW(OCTET_ASSERT(x == 3));
}

TEST(Error, IsARuntimeError) {
  try {
    OCTET_CHECK(false, "caught as the base");
    ADD_FAILURE() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("caught as the base"));
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr);
  }
}

TEST(Error, ConcatStreamsEveryPart) {
  EXPECT_EQ(detail::concat("a", 1, '-', 2.5f, std::string("z")), "a1-2.5z");
  EXPECT_EQ(detail::concat(""), "");
}

TEST(Log, LevelNamesMapToSpdlogLevels) {
  const std::pair<const char*, spdlog::level::level_enum> levels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"critical", spdlog::level::critical},
      {"off", spdlog::level::off}};
  const auto previous = logger().level();
  for (auto [name, level] : levels) {
    set_log_level(name);
    EXPECT_EQ(logger().level(), level) << name;
  }
  logger().set_level(previous);
  EXPECT_EQ(logger().name(), "octet");
}

TEST(Log, BadLevelThrowsNamingIt) {
  const auto previous = logger().level();
  for (const char* bad : {"loud", "WARN", "warning", ""}) {
    EXPECT_THAT(error_of([&] { set_log_level(bad); }),
                HasSubstr(std::string("unknown log level \"") + bad + "\""));
  }
  EXPECT_EQ(logger().level(), previous);  // a bad name leaves the level alone
}

}  // namespace
}  // namespace octet
