// The `octet` executable: hands the command line to octet::cli::run_octet.
#include <iostream>
#include <string>
#include <vector>

#include "tools/commands.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return octet::cli::run_octet(args, std::cout, std::cerr);
}
