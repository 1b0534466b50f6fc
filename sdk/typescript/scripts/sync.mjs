#!/usr/bin/env node
// Copies the gateway's web/protocol.js (the one source, which the chat page uses) into this
// package. `node scripts/sync.mjs --check` only compares, and exits 1 when they differ.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const source = fileURLToPath(new URL('../../../web/protocol.js', import.meta.url));
const copy = fileURLToPath(new URL('../protocol.js', import.meta.url));

const want = readFileSync(source);
let have = null;
try {
  have = readFileSync(copy);
} catch {
  /* no copy yet */
}
const same = have !== null && Buffer.compare(want, have) === 0;
if (process.argv.includes('--check')) {
  if (!same) {
    console.error(`sdk/typescript/protocol.js differs from web/protocol.js: run \`npm run sync\` in sdk/typescript`);
    process.exit(1);
  }
  console.log('protocol.js is in sync with web/protocol.js');
} else if (same) {
  console.log('protocol.js is already in sync with web/protocol.js');
} else {
  writeFileSync(copy, want);
  console.log(`copied web/protocol.js to sdk/typescript/protocol.js (${want.length} bytes)`);
}
