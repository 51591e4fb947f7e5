#!/usr/bin/env bash
# Keeps lab-notebook lines out of README.md, the other top-level Markdown pages and the sources:
# processor names, issue and commit references, dates of measurements and "who ran what when".
# Those belong in docs/perf/*.md (measurements, with their date and machine), CHANGELOG.md or a
# commit message; a comment says what the code does now. Needs no build; prints every hit as
# file:line: text and exits 1 if there is one.
#   tools/check_docs.sh            (from anywhere in the tree)
# Not checked: docs/, CHANGELOG.md, build*/ folders, tests' data. A line that must name such a
# thing (an emulated device's documented properties, a sample of a tool's output) is listed in
# tools/check_docs.allow with the reason.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
allow_file="tools/check_docs.allow"

# The files: tracked and new (not ignored) ones when this is a git checkout, else a walk.
list_files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard
  else
    find . -path ./.git -prune -o -type f -print | sed 's|^\./||'
  fi
}
mapfile -t files < <(list_files | sort -u |
  grep -Ev '^(docs/|CHANGELOG\.md$|build[^/]*/|\.git/|tools/check_docs\.sh$)' |
  grep -Ev '/(testdata|corpus|seeds|fixtures)/' |
  grep -E '(\.(h|hpp|cpp|cc|cu|cuh|cmake|sh|py|md)|CMakeLists\.txt|^tools/gpu-check|^\.ci/run)$' |
  while IFS= read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done)

# Whole lines, case-sensitive: processor and GPU models. Microarchitectures a code path is written
# for (Hopper, Blackwell, sm_90, "90a") and OpenBLAS's core-type names (SkylakeX, Haswell,
# Cooperlake, Zen) are identifiers, not notebook lines, so they are not patterns here.
processors='\b(Zen ?[1-6]|EPYC|Opteron|Ryzen|Threadripper|Xeon|Sapphire Rapids|Emerald Rapids|'
processors+='Granite Rapids|Ice ?Lake|Cascade ?Lake|Cooper ?Lake|Skylake|Kaby ?Lake|Alder ?Lake|'
processors+='Raptor ?Lake|Naples|Milan|Genoa|Bergamo|Turin|[HA]100|H200|H800|B[12]00|G[HB]200)\b'
processors+='|\bfamily [0-9]+ model [0-9]+'
# Whole lines, any case: issue and stop numbers, and who measured or tried what.
history='\b(issues?|stop|pull request) #?[0-9]+\b|\bmeasured on\b|\bwe (tried|measured)\b'
history+='|\bsessions?\b|\bthis stop\b'
# Comments only (and all of a Markdown page): "#123" references and commit hashes (7-40 hex
# digits with a digit and a letter, not part of a number or word); in source comments, dates too
# (a Markdown page may date its figures: the README's performance table does).
refs='(?<![\w&#/])#[0-9]+\b|(?<![\w.\-/])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b'
refs+='(?![\w-])'
dates='\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b'

# Each line with a comment as file:line:<comment text><US><the line> (Markdown: all of it).
comments() {
  local f=$1
  case "$f" in
    *.md) awk -v f="$f" '{ print f ":" NR ":" $0 "\037" $0 }' "$f" ;;
    *.h | *.hpp | *.cpp | *.cc | *.cu | *.cuh)
      awk -v f="$f" '
        { text = "" }
        match($0, /\/\//) { text = substr($0, RSTART + 2) }
        text == "" && $0 ~ /^[ \t]*(\/\*|\*)/ { text = $0 }
        text != "" { print f ":" NR ":" text "\037" $0 }' "$f" ;;
    *)  # shell, CMake, Python: from a "#" that starts the line or follows a blank
      awk -v f="$f" '
        match($0, /(^|[ \t])#+/) { print f ":" NR ":" substr($0, RSTART + RLENGTH) "\037" $0 }' "$f" ;;
  esac
}

hits=$(
  {
    grep -HnP -- "$processors" "${files[@]}" || true
    grep -HniP -- "$history" "${files[@]}" || true
    for f in "${files[@]}"; do comments "$f"; done |
      { grep -P -- "^[^:]+:[0-9]+:[^\037]*($refs)|^[^:]+(?<!\.md):[0-9]+:[^\037]*$dates" ||
        true; } |
      awk -F '\037' '{ split($1, p, ":"); print p[1] ":" p[2] ":" $2 }'
  } | sort -t: -k1,1 -k2,2n -u
)

# The allow-list: "path: text" lines; a hit in path whose line holds text is allowed.
if [ -n "$hits" ] && [ -f "$allow_file" ]; then
  hits=$(printf '%s\n' "$hits" | awk -v allow="$allow_file" '
    BEGIN {
      while ((getline entry < allow) > 0) {
        if (entry ~ /^[ \t]*(#|$)/) continue
        i = index(entry, ": ")
        if (i == 0) continue
        n++; path[n] = substr(entry, 1, i - 1); text[n] = substr(entry, i + 2)
      }
    }
    {
      split($0, p, ":"); rest = substr($0, length(p[1]) + length(p[2]) + 3)
      for (k = 1; k <= n; k++) if (p[1] == path[k] && index(rest, text[k]) > 0) next
      print
    }')
fi

if [ -n "$hits" ]; then
  printf '%s\n' "$hits"
  echo "check_docs: $(printf '%s\n' "$hits" | wc -l) lab-notebook line(s) above: a comment or" \
    "README says what the code does now; measurements go to docs/perf/ (dated, with the" \
    "machine), history to CHANGELOG.md (allow-list: $allow_file)" >&2
  exit 1
fi
echo "check_docs: ${#files[@]} files, no lab-notebook line"
