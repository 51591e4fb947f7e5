// The Hugging Face folders tests/support/hf_reference.py writes (random-weight GPT-2 models with
// reference logits, and folders with one fault each), made once per test binary.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "tests/support/scratch_dir.h"

namespace octet::test {

struct HfFolders {
  std::string dir;    // holds gpt2_f32/, gpt2_bf16/, gpt2_f16_sharded/, bad_*/
  std::string error;  // why they could not be made; empty when they were
  std::string folder(const std::string& name) const { return dir + "/" + name; }
};

// Debian's python3 with python3-numpy (tools/setup.sh installs it) runs the script.
inline const HfFolders& hf_folders() {
  static std::unique_ptr<ScratchDir> scratch;
  static const HfFolders folders = [] {
    HfFolders f;
    const std::filesystem::path script =
        std::filesystem::path(__FILE__).parent_path() / "hf_reference.py";
    if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
      f.error =
          "/usr/bin/python3 with numpy is missing (Debian's python3-numpy): run tools/setup.sh";
      return f;
    }
    scratch = std::make_unique<ScratchDir>();
    const std::string command =
        "/usr/bin/python3 '" + script.string() + "' '" + scratch->path().string() + "'";
    if (std::system(command.c_str()) != 0) {
      f.error = "\"" + command + "\" failed";
      return f;
    }
    f.dir = scratch->path().string();
    return f;
  }();
  return folders;
}

}  // namespace octet::test
