// Build-time tool of the CUDA emulation build (cmake/cuda_emulation.cmake): copies a .cu or .cuh
// file to C++ that g++ compiles against the shim in tests/cuda_emu/include. Three rewrites, each
// keeping the line count so that diagnostics and __LINE__ point into the real file (a #line
// directive names it):
//   NAME<<<grid, block[, smem[, stream]]>>>(args...)
//     -> ::octet::emu::launch(ID, "NAME", __FILE__, __LINE__, grid, block, smem|0, stream|nullptr,
//                             [](auto&&... a) { NAME(a...); }, args...)
//     ID is &NAME (the key cudaFuncSetAttribute uses), or nullptr when NAME is a bare name of a
//     kernel template whose arguments are deduced from the call;
//   extern __shared__ [__align__(n)|alignas(n)] TYPE NAME[];
//     -> TYPE* NAME = ::octet::emu::dynamic_shared<TYPE>();
//   __shared__ TYPE NAME[...], ...;   (in a function body)
//     -> the same, followed by a call that poisons NAME's bytes once per emulated block.
// Usage: octet_cuda_translate <input> <output>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& file, const std::string& text, size_t pos,
                       const std::string& what) {
  size_t line = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) line += text[i] == '\n';
  std::cerr << file << ":" << line << ": octet_cuda_translate: " << what << "\n";
  std::exit(1);
}

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// code[i] is true where text[i] is C++ code: not in a comment, a string or character literal, or
// a preprocessor directive (with its continuation lines).
std::vector<bool> code_mask(const std::string& s) {
  std::vector<bool> code(s.size(), true);
  size_t i = 0;
  bool line_start = true;
  while (i < s.size()) {
    const char c = s[i];
    if (line_start && (c == ' ' || c == '\t')) {
      ++i;
      continue;
    }
    if (line_start && c == '#') {
      while (i < s.size() && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\n') code[i++] = false;
        code[i++] = false;
      }
      continue;
    }
    line_start = false;
    if (c == '\n') {
      line_start = true;
      ++i;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') code[i++] = false;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const size_t end = s.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? s.size() : end + 2;
      while (i < stop) code[i++] = false;
    } else if (c == 'R' && i + 1 < s.size() && s[i + 1] == '"' && (i == 0 || !is_ident(s[i - 1]))) {
      const size_t open = s.find('(', i + 2);
      if (open == std::string::npos) return code;
      std::string close(1, ')');
      close.append(s, i + 2, open - i - 2);
      close += '"';
      const size_t end = s.find(close, open);
      const size_t stop = end == std::string::npos ? s.size() : end + close.size();
      while (i < stop) code[i++] = false;
    } else if (c == '"' || (c == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(
                                                        s[i - 1]))))) {  // 1'000 separators
      code[i++] = false;
      while (i < s.size() && s[i] != c && s[i] != '\n') {
        if (s[i] == '\\') code[i++] = false;
        if (i < s.size()) code[i++] = false;
      }
      if (i < s.size()) code[i++] = false;
    } else {
      ++i;
    }
  }
  return code;
}

class Translator {
 public:
  Translator(std::string file, std::string text)
      : file_(std::move(file)), s_(std::move(text)), code_(code_mask(s_)) {}

  std::string run() {
    collect_template_kernels();
    std::string out;
    out += "#line 1 \"" + file_ + "\"\n";
    size_t i = 0;
    std::vector<char> braces;  // 'c' code block, 's' namespace/class scope, 'i' initializer
    while (i < s_.size()) {
      if (!code_[i]) {
        // `#pragma unroll [n]` is nvcc's; g++ takes `#pragma GCC unroll n` and warns on the rest.
        if (s_[i] == '#' && (i == 0 || s_[i - 1] == '\n') &&
            s_.compare(i, 14, "#pragma unroll") == 0) {
          const size_t eol = s_.find('\n', i);
          const std::string count = squeeze(s_.substr(i + 14, eol - i - 14));
          if (!count.empty() && std::isdigit(static_cast<unsigned char>(count[0]))) {
            out += "#pragma GCC unroll " + count;
          }
          i = eol;
          continue;
        }
        out += s_[i++];
        continue;
      }
      if (s_.compare(i, 3, "<<<") == 0) {
        i = launch(i, out);
        continue;
      }
      if (word_at(i, "extern") && next_word(i + 6) == "__shared__") {
        i = dynamic_shared(i, out);
        continue;
      }
      if (word_at(i, "__shared__")) {
        const bool in_code = !braces.empty() && braces.back() == 'c';
        i = static_shared(i, out, in_code);
        continue;
      }
      if (s_[i] == '{') braces.push_back(brace_kind(i));
      if (s_[i] == '}' && !braces.empty()) braces.pop_back();
      out += s_[i++];
    }
    return out;
  }

 private:
  bool word_at(size_t i, const std::string& w) const {
    if (s_.compare(i, w.size(), w) != 0) return false;
    if (i > 0 && is_ident(s_[i - 1])) return false;
    return i + w.size() >= s_.size() || !is_ident(s_[i + w.size()]);
  }

  size_t skip_space(size_t i) const {
    while (i < s_.size() && (std::isspace(static_cast<unsigned char>(s_[i])) || !code_[i])) ++i;
    return i;
  }

  std::string next_word(size_t i) const {
    i = skip_space(i);
    size_t j = i;
    while (j < s_.size() && is_ident(s_[j])) ++j;
    return s_.substr(i, j - i);
  }

  // The position of the bracket closing the one at `open` ((, [, {, <), in code.
  size_t match(size_t open) const {
    const char o = s_[open];
    const char c = o == '(' ? ')' : o == '[' ? ']' : o == '{' ? '}' : '>';
    int depth = 0;
    for (size_t i = open; i < s_.size(); ++i) {
      if (!code_[i]) continue;
      if (s_[i] == o) ++depth;
      if (s_[i] == c && --depth == 0) return i;
    }
    fail(file_, s_, open, std::string("unbalanced '") + o + "'");
  }

  // Names of kernel templates: `template <...> __global__ ... NAME(`.
  void collect_template_kernels() {
    for (size_t i = 0; i < s_.size(); ++i) {
      if (!code_[i] || !word_at(i, "__global__")) continue;
      size_t b = i;
      while (b > 0 && (std::isspace(static_cast<unsigned char>(s_[b - 1])) || !code_[b - 1])) --b;
      const bool templated = b > 0 && s_[b - 1] == '>';
      size_t j = i + 10;
      std::string name;
      while (j < s_.size()) {
        const std::string w = next_word(j);
        j = skip_space(j);
        if (w.empty()) break;
        j += w.size();
        if (w == "__launch_bounds__") {
          j = match(skip_space(j)) + 1;
          continue;
        }
        if (s_[skip_space(j)] == '(') {
          name = w;
          break;
        }
      }
      if (templated && !name.empty()) template_kernels_.insert(name);
    }
  }

  // What a `{` opens, from the text before it.
  char brace_kind(size_t pos) const {
    size_t b = pos;
    while (b > 0 && (std::isspace(static_cast<unsigned char>(s_[b - 1])) || !code_[b - 1])) --b;
    if (b == 0) return 's';
    const char prev = s_[b - 1];
    if (prev == '=' || prev == '(' || prev == ',' || prev == '[') return 'i';  // an initializer
    // The statement start: after the last ; { } in code.
    size_t st = b;
    while (st > 0 &&
           !(code_[st - 1] && (s_[st - 1] == ';' || s_[st - 1] == '{' || s_[st - 1] == '}'))) {
      --st;
    }
    const std::string first = next_word(st);
    if (first == "namespace" || first == "struct" || first == "class" || first == "union" ||
        first == "enum" || (first == "extern" && prev == '"')) {
      // `struct X { ... }` at statement start; a lambda or function body inside such a
      // statement would end with ')' instead.
      if (prev != ')') return 's';
    }
    if (first == "template" && prev != ')') return 's';
    return 'c';
  }

  // Appends the text of [a, b) with runs of whitespace (newlines included) made one space.
  static std::string squeeze(const std::string& t) {
    std::string r;
    bool space = false;
    for (char c : t) {
      if (std::isspace(static_cast<unsigned char>(c))) {
        space = !r.empty();
        continue;
      }
      if (space) r += ' ';
      space = false;
      r += c;
    }
    return r;
  }

  static int newlines(const std::string& t) {
    int n = 0;
    for (char c : t) n += c == '\n';
    return n;
  }

  // Splits [a, b) at commas outside (), [], {}.
  std::vector<std::string> split_args(size_t a, size_t b) const {
    std::vector<std::string> parts;
    int depth = 0;
    size_t start = a;
    for (size_t i = a; i < b; ++i) {
      if (!code_[i]) continue;
      const char c = s_[i];
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      if (c == ',' && depth == 0) {
        parts.push_back(s_.substr(start, i - start));
        start = i + 1;
      }
    }
    parts.push_back(s_.substr(start, b - start));
    return parts;
  }

  // `<<<` at `lt`: the launch whose name ends before it. `out` already holds the name; it is
  // taken back out and the whole launch written in its place.
  size_t launch(size_t lt, std::string& out) {
    // The kernel's name: identifiers, ::, and balanced template arguments, backwards.
    size_t b = lt;
    while (b > 0 && std::isspace(static_cast<unsigned char>(s_[b - 1]))) --b;
    size_t name_begin = b;
    while (name_begin > 0) {
      size_t p = name_begin;
      if (s_[p - 1] == '>') {
        int depth = 0;
        size_t q = p;
        while (q > 0) {
          --q;
          if (s_[q] == '>') ++depth;
          if (s_[q] == '<' && --depth == 0) break;
        }
        if (depth != 0) fail(file_, s_, lt, "unbalanced template arguments before <<<");
        p = q;
        while (p > 0 && std::isspace(static_cast<unsigned char>(s_[p - 1]))) --p;
      }
      size_t q = p;
      while (q > 0 && is_ident(s_[q - 1])) --q;
      if (q == p) break;
      name_begin = q;
      if (q >= 2 && s_[q - 1] == ':' && s_[q - 2] == ':') {
        name_begin = q - 2;
        continue;
      }
      break;
    }
    if (name_begin == b) fail(file_, s_, lt, "no kernel name before <<<");
    const size_t taken = lt - name_begin;  // name and the whitespace after it, already in out
    const std::string name_text = s_.substr(name_begin, b - name_begin);
    out.resize(out.size() - taken);
    const std::string name = squeeze(name_text);

    // The configuration up to >>> (outside parentheses), then the argument list.
    int depth = 0;
    size_t gt = std::string::npos;
    for (size_t i = lt + 3; i + 2 < s_.size(); ++i) {
      if (!code_[i]) continue;
      const char c = s_[i];
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      if (depth == 0 && s_.compare(i, 3, ">>>") == 0) {
        gt = i;
        break;
      }
    }
    if (gt == std::string::npos) fail(file_, s_, lt, "<<< without >>>");
    const std::vector<std::string> config = split_args(lt + 3, gt);
    if (config.size() < 2 || config.size() > 4) {
      fail(file_, s_, lt, "a launch configuration needs 2 to 4 expressions");
    }
    const size_t open = skip_space(gt + 3);
    if (open >= s_.size() || s_[open] != '(') fail(file_, s_, gt, "no argument list after >>>");
    const size_t close = match(open);
    const std::string args = s_.substr(open + 1, close - open - 1);
    const bool has_args = !squeeze(args).empty();

    const bool deduced =
        name.find_first_of("<:") == std::string::npos && template_kernels_.count(name) > 0;
    std::string r = "::octet::emu::launch(";
    r += deduced ? "nullptr" : "reinterpret_cast<const void*>(&" + name + ")";
    r += ", \"" + name + "\", __FILE__, __LINE__, " + config[0] + "," + config[1] + ",";
    r += config.size() > 2 ? config[2] : std::string(" 0");
    r += ",";
    r += config.size() > 3 ? config[3] : std::string(" nullptr");
    r += ", [](auto&&... octet_emu_a) { " + name + "(octet_emu_a...); }";
    if (has_args) r += "," + args;
    r += ")";
    const std::string original = s_.substr(name_begin, close + 1 - name_begin);
    for (int k = newlines(r); k < newlines(original); ++k) r += '\n';
    out += r;
    return close + 1;
  }

  // The end of the declaration starting at `i`: its ';' outside brackets.
  size_t statement_end(size_t i) const {
    int depth = 0;
    for (; i < s_.size(); ++i) {
      if (!code_[i]) continue;
      const char c = s_[i];
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      if (c == ';' && depth == 0) return i;
    }
    fail(file_, s_, i, "declaration without ';'");
  }

  // Removes __shared__, extern, static, __align__(n), alignas(n) from a declaration's text.
  static std::string strip_qualifiers(std::string t) {
    for (const char* w : {"__shared__", "extern", "static"}) {
      for (size_t p; (p = t.find(w)) != std::string::npos;) t.erase(p, std::string(w).size());
    }
    for (const char* w : {"__align__", "alignas"}) {
      for (size_t p; (p = t.find(w)) != std::string::npos;) {
        const size_t open = t.find('(', p);
        int depth = 0;
        size_t q = open;
        for (; q < t.size(); ++q) {
          if (t[q] == '(') ++depth;
          if (t[q] == ')' && --depth == 0) break;
        }
        t.erase(p, q + 1 - p);
      }
    }
    return t;
  }

  // The declared name in one declarator: the last identifier before any [...] and '='.
  static std::string declarator_name(std::string d) {
    const size_t eq = d.find('=');
    if (eq != std::string::npos) d.resize(eq);
    const size_t br = d.find('[');
    if (br != std::string::npos) d.resize(br);
    size_t e = d.size();
    while (e > 0 && !is_ident(d[e - 1])) --e;
    size_t b = e;
    while (b > 0 && is_ident(d[b - 1])) --b;
    return d.substr(b, e - b);
  }

  size_t dynamic_shared(size_t i, std::string& out) {
    const size_t end = statement_end(i);
    const std::string decl = squeeze(strip_qualifiers(s_.substr(i, end - i)));
    const size_t br = decl.find('[');
    if (br == std::string::npos || decl.find(']', br) != br + 1) {
      fail(file_, s_, i, "extern __shared__ must declare an unsized array NAME[]");
    }
    const std::string name = declarator_name(decl);
    std::string type = decl.substr(0, decl.rfind(name, br));
    while (!type.empty() && type.back() == ' ') type.pop_back();
    std::string r = type + "* " + name + " = ::octet::emu::dynamic_shared<" + type + ">()";
    for (int k = 0; k < newlines(s_.substr(i, end - i)); ++k) r += '\n';
    out += r;
    return end;  // the ';' is copied by the caller's loop
  }

  size_t static_shared(size_t i, std::string& out, bool in_code) {
    const size_t end = statement_end(i);
    out += s_.substr(i, end + 1 - i);
    if (!in_code) return end + 1;  // namespace scope: one object for the program, not poisoned
    const std::string decl = strip_qualifiers(s_.substr(i, end - i));
    // Split the declarators; the first one carries the type.
    std::vector<std::string> parts;
    int depth = 0;
    size_t start = 0;
    for (size_t k = 0; k < decl.size(); ++k) {
      const char c = decl[k];
      if (c == '(' || c == '[' || c == '{' || c == '<') ++depth;
      if (c == ')' || c == ']' || c == '}' || c == '>') --depth;
      if (c == ',' && depth == 0) {
        parts.push_back(decl.substr(start, k - start));
        start = k + 1;
      }
    }
    parts.push_back(decl.substr(start));
    for (const std::string& p : parts) {
      const std::string name = declarator_name(p);
      if (name.empty()) fail(file_, s_, i, "cannot find the name of a __shared__ variable");
      const std::string gen = "octet_emu_gen_" + name;
      out += " static unsigned long long " + gen + " = 0; ::octet::emu::static_shared(&" + name +
             ", sizeof(" + name + "), &" + gen + ");";
    }
    return end + 1;
  }

  std::string file_;
  std::string s_;
  std::vector<bool> code_;
  std::set<std::string> template_kernels_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: octet_cuda_translate <input.cu> <output.cpp>\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "octet_cuda_translate: cannot read " << argv[1] << "\n";
    return 1;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string result = Translator(argv[1], buffer.str()).run();
  // Write to a temporary file and rename, so that an interrupted build leaves no half file.
  const std::string tmp = std::string(argv[2]) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << result;
    if (!out) {
      std::cerr << "octet_cuda_translate: cannot write " << tmp << "\n";
      return 1;
    }
  }
  if (std::rename(tmp.c_str(), argv[2]) != 0) {
    std::cerr << "octet_cuda_translate: cannot rename " << tmp << " to " << argv[2] << "\n";
    return 1;
  }
  return 0;
}
