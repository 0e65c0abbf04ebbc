// GPT-2 ids from the reference encoder (npm gpt-3-encoder 1.1.4's Encoder.js), for
// gpt2_tokenizer_test to compare against.
//   node gpt2_reference.js ENCODER_JS CASES OUT
// CASES holds texts, each written as its length in bytes, a newline, then the bytes (valid
// UTF-8). OUT gets two lines per text: its ids as plain text, then its ids when each
// "<|endoftext|>" is the special token 50256 (the text between encoded on its own, which is
// what Gpt2Tokenizer does; the reference itself knows no special tokens).
'use strict';
const fs = require('fs');
const path = require('path');

const [encoderJs, casesPath, outPath] = process.argv.slice(2);
const { encode } = require(path.resolve(encoderJs));
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

const input = fs.readFileSync(casesPath);
const lines = [];
for (let at = 0; at < input.length;) {
  const newline = input.indexOf(10, at);
  const length = Number(input.toString('latin1', at, newline));
  const text = utf8.decode(input.subarray(newline + 1, newline + 1 + length));
  at = newline + 1 + length;
  lines.push(encode(text).join(' '));
  const special = [];
  text.split('<|endoftext|>').forEach((part, i) => {
    if (i > 0) special.push(50256);
    special.push(...encode(part));
  });
  lines.push(special.join(' '));
}
fs.writeFileSync(outPath, lines.map(line => line + '\n').join(''));
