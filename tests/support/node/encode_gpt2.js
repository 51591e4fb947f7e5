#!/usr/bin/env node
// The independent encoder octet's BPE tokenizer is compared with: js-tiktoken's "gpt2" encoding.
//   node encode_gpt2.js IN OUT          writes the ids of IN's text (UTF-8) to OUT as little-endian
//                                       int32; "<|endoftext|>" in the text is the special token
//   node encode_gpt2.js --time IN REPS  encodes IN REPS times and prints
//                                       {"bytes": N, "tokens": T, "seconds": best of the runs}
//   node encode_gpt2.js --split ENCODING IN OUT
//                                       writes the UTF-8 byte lengths of the pieces that
//                                       ENCODING's split pattern (js-tiktoken's pat_str of gpt2
//                                       or cl100k_base, the pattern Llama-3 took over) cuts IN's
//                                       text into, as little-endian int32
'use strict';
const fs = require('fs');
const { getEncoding } = require('js-tiktoken');

function usage() {
  process.stderr.write('usage: node encode_gpt2.js IN OUT | --time IN REPS | ' +
                       '--split gpt2|cl100k_base IN OUT\n');
  process.exit(2);
}

function writeInt32s(path, values) {
  const out = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => out.writeInt32LE(v, i * 4));
  fs.writeFileSync(path, out);
}

const args = process.argv.slice(2);
if (args[0] === '--split') {
  if (args.length !== 4 || !['gpt2', 'cl100k_base'].includes(args[1])) usage();
  const ranks = require('js-tiktoken/ranks/' + args[1]);
  const pattern = new RegExp((ranks.default || ranks).pat_str, 'ug');
  const text = fs.readFileSync(args[2]).toString('utf8');
  const lengths = [];
  let covered = 0;
  for (const match of text.matchAll(pattern)) {
    // The pattern matches everywhere; a gap would mean the text was not split in full.
    if (match.index !== covered) throw new Error('unmatched text at ' + covered);
    covered += match[0].length;
    lengths.push(Buffer.byteLength(match[0], 'utf8'));
  }
  writeInt32s(args[3], lengths);
  process.exit(0);
}
const encoding = getEncoding('gpt2');
if (args[0] === '--time') {
  if (args.length !== 3) usage();
  const bytes = fs.readFileSync(args[1]);
  const text = bytes.toString('utf8');
  const reps = Math.max(1, parseInt(args[2], 10) || 1);
  let best = Infinity;
  let tokens = 0;
  for (let i = 0; i < reps; ++i) {
    const start = process.hrtime.bigint();
    tokens = encoding.encode(text, 'all').length;
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
  }
  process.stdout.write(JSON.stringify({ bytes: bytes.length, tokens, seconds: best }) + '\n');
} else {
  if (args.length !== 2) usage();
  writeInt32s(args[1], encoding.encode(fs.readFileSync(args[0]).toString('utf8'), 'all'));
}
