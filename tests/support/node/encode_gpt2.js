#!/usr/bin/env node
// The independent encoder octet's BPE tokenizer is compared with: js-tiktoken's "gpt2" encoding.
//   node encode_gpt2.js IN OUT          writes the ids of IN's text (UTF-8) to OUT as little-endian
//                                       int32; "<|endoftext|>" in the text is the special token
//   node encode_gpt2.js --time IN REPS  encodes IN REPS times and prints
//                                       {"bytes": N, "seconds": best of the REPS runs}
'use strict';
const fs = require('fs');
const { getEncoding } = require('js-tiktoken');

function usage() {
  process.stderr.write('usage: node encode_gpt2.js IN OUT | node encode_gpt2.js --time IN REPS\n');
  process.exit(2);
}

const args = process.argv.slice(2);
const encoding = getEncoding('gpt2');
if (args[0] === '--time') {
  if (args.length !== 3) usage();
  const bytes = fs.readFileSync(args[1]);
  const text = bytes.toString('utf8');
  const reps = Math.max(1, parseInt(args[2], 10) || 1);
  let best = Infinity;
  for (let i = 0; i < reps; ++i) {
    const start = process.hrtime.bigint();
    encoding.encode(text, 'all');
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
  }
  process.stdout.write(JSON.stringify({ bytes: bytes.length, seconds: best }) + '\n');
} else {
  if (args.length !== 2) usage();
  const ids = encoding.encode(fs.readFileSync(args[0]).toString('utf8'), 'all');
  const out = Buffer.alloc(ids.length * 4);
  ids.forEach((id, i) => out.writeInt32LE(id, i * 4));
  fs.writeFileSync(args[1], out);
}
