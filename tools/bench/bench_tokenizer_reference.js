// The reference encoder's speed (npm gpt-3-encoder 1.1.4's Encoder.js) on a text file, with
// the protocol of bench_tokenizer.cc: line by line, a cold pass (the module's word cache
// empty), then the best of two warm passes.
//   node bench_tokenizer_reference.js ENCODER_JS TEXT_FILE [IDS_OUT]
'use strict';
const fs = require('fs');
const path = require('path');

const [encoderJs, textPath, idsPath] = process.argv.slice(2);
const { encode } = require(path.resolve(encoderJs));
const bytes = fs.readFileSync(textPath);
const lines = bytes.toString('utf8').split(/(?<=\n)/);  // each line keeps its newline

function pass() {
  const ids = [];
  const start = process.hrtime.bigint();
  for (const line of lines) {
    for (const id of encode(line)) ids.push(id);
  }
  return [Number(process.hrtime.bigint() - start) / 1e9, ids];
}

const mb = bytes.length / 1e6;
const [cold, ids] = pass();
const warm = Math.min(pass()[0], pass()[0]);
console.log(`reference: cold ${(mb / cold).toFixed(2).padStart(7)} MB/s, warm ` +
            `${(mb / warm).toFixed(2).padStart(7)} MB/s (${ids.length} ids from ${mb.toFixed(2)} MB)`);
if (idsPath) fs.writeFileSync(idsPath, ids.map(id => id + '\n').join(''));
