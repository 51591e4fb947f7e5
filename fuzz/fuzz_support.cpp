// The fuzz harnesses' scratch files and failure report.
#include "fuzz/fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/log.h"
#include "runtime/parallel.h"

namespace octet::fuzz {
namespace {

namespace fs = std::filesystem;

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::error_code ec;
    const fs::path base =
        fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    std::string pattern = (base / "octet-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "octet fuzz: cannot make a scratch directory in %s: %s\n", base.c_str(),
                   std::strerror(errno));
      std::abort();
    }
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

ScratchDir& scratch() {
  static ScratchDir dir;
  return dir;
}

}  // namespace

std::string scratch_path(std::string_view name) { return (scratch().path / name).string(); }

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail("cannot write the scratch file " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read the scratch file " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void fail(const std::string& what) {
  std::fprintf(stderr, "\noctet fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

void quiet_library() {
  set_log_level("off");
  set_num_threads(1);
  (void)scratch();  // made before the first input, so its removal at exit comes after the last
}

bool names_special_file(std::string_view text) {
  for (std::string_view dir : {"/dev/", "/proc/", "/sys/"}) {
    if (text.find(dir) != std::string_view::npos) return true;
  }
  return false;
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.nbytes() == 0) return true;
  return std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace octet::fuzz
