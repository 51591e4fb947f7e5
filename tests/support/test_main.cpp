// GoogleTest entry point shared by every test binary: quiet library logging unless asked.
#include <gtest/gtest.h>

#include "runtime/log.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  octet::set_log_level("warn");
  return RUN_ALL_TESTS();
}
