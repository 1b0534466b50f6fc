// One source: the package's protocol.js is the gateway's web/protocol.js, byte for byte.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const web = fileURLToPath(new URL('../../../web/protocol.js', import.meta.url));
const copy = fileURLToPath(new URL('../protocol.js', import.meta.url));

test('protocol.js is byte-equal to web/protocol.js (run `npm run sync` if not)', () => {
  const a = readFileSync(web);
  const b = readFileSync(copy);
  assert.ok(Buffer.compare(a, b) === 0, `sdk/typescript/protocol.js (${b.length} bytes) differs from web/protocol.js (${a.length} bytes): run \`npm run sync\` in sdk/typescript`);
});

test('scripts/sync.mjs --check agrees', () => {
  const r = spawnSync(process.execPath, [fileURLToPath(new URL('../scripts/sync.mjs', import.meta.url)), '--check'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
});

test('index.js re-exports everything protocol.js exports', async () => {
  const pkg = await import('hermes-mobile-client');
  const direct = await import('../protocol.js');
  assert.deepEqual(Object.keys(pkg).sort(), Object.keys(direct).sort());
  for (const k of Object.keys(direct)) assert.equal(pkg[k], direct[k], k);
  for (const name of ['HermesClient', 'HermesError', 'charCount', 'newDeviceId', 'newId', 'kindFromMime', 'validateCard',
    'hasHiddenChars', 'revealHiddenChars', 'splitHiddenChars', 'pairWithCode',
    'bytesToBase64', 'base64ToBytes', 'bytesToBase64Url', 'base64UrlToBytes', 'MAX_TEXT_CHARS', 'MAX_MEDIA_BYTES',
    'MAX_AUDIO_BYTES', 'MEDIA_CHUNK_BYTES', 'UPLOAD_PART_BYTES', 'MAX_MEDIA_PARTS', 'PROMPT_OPTIONS']) {
    assert.ok(name in pkg, `${name} is exported (index.d.ts declares it)`);
  }
});

test('index.d.ts declares exactly the runtime exports', async () => {
  const dts = readFileSync(fileURLToPath(new URL('../index.d.ts', import.meta.url)), 'utf8');
  const declared = [...dts.matchAll(/^export declare (?:const|function|class) (\w+)/gm)].map((m) => m[1]).sort();
  const runtime = Object.keys(await import('hermes-mobile-client')).sort();
  assert.deepEqual(declared, runtime);
});
