// An upload with progress, echoed back by the demo agent and reassembled byte-equal; a 4 MB
// download in two chunks (U1).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { UPLOAD_PART_BYTES } from 'hermes-mobile-client';
import { assertFramesValid, closeClients, connected, newClient, record, seenOrWait, startGateway, waitFor } from './helpers.mjs';

let gw;
let client;
before(async () => {
  gw = await startGateway();
  client = newClient(gw);
  await connected(client);
});
after(async () => {
  closeClients();
  await gw.stop();
  assertFramesValid();
});

test('an upload in chunks with progress, echoed back and reassembled byte-equal', async () => {
  const bytes = randomBytes(700 * 1024); // two parts of 512 KiB at most
  assert.ok(bytes.length > UPLOAD_PART_BYTES);
  const progress = record(client, 'uploadprogress');
  const callbacks = [];
  const confirmed = record(client, 'confirmed');
  const mediaProgress = record(client, 'mediaprogress');
  let id = null;
  const echo = waitFor(client, 'media', (d) => d.replyTo !== null && d.replyTo === id, 10000);
  const said = waitFor(client, 'message', (d) => d.final && d.text.startsWith('got document up.bin'), 10000);
  id = client.sendFile(new Blob([bytes], { type: 'application/octet-stream' }), {
    filename: 'up.bin',
    onProgress: (p) => callbacks.push(p),
  });
  const msg = await said;
  assert.equal(msg.text, `got document up.bin (${bytes.length} bytes, application/octet-stream)`);
  const media = await echo;
  await seenOrWait(confirmed, client, 'confirmed', (d) => d.id === id);

  // Progress: for this id, never going back, 100 % only at the end (once confirmed).
  const mine = progress.filter((p) => p.id === id);
  assert.ok(mine.length >= 2, `${mine.length} progress events`);
  assert.deepEqual(callbacks, mine, 'onProgress gets what uploadprogress gets');
  for (let i = 1; i < mine.length; i++) assert.ok(mine[i].loaded >= mine[i - 1].loaded, 'progress never goes back');
  assert.equal(mine[0].percent, 0);
  assert.ok(mine.slice(0, -1).every((p) => p.percent < 100));
  assert.deepEqual(mine.at(-1), { id, loaded: bytes.length, total: bytes.length, percent: 100 });

  // The echo: same bytes, reassembled.
  assert.equal(media.kind, 'document');
  assert.equal(media.filename, 'up.bin');
  assert.equal(media.size, bytes.length);
  assert.equal(media.url, null);
  const back = Buffer.from(await media.blob.arrayBuffer());
  assert.ok(back.equals(bytes), 'the echo is byte-equal to the upload');
  assert.ok(mediaProgress.some((p) => p.id === media.id));
});

test('a 4 MB download arrives in chunks and is reassembled', async () => {
  const progress = record(client, 'mediaprogress');
  const done = waitFor(client, 'media', (d) => d.filename === 'demo-4000000.bin', 10000);
  client.sendText('/file 4000000');
  const media = await done;
  assert.equal(media.kind, 'document');
  assert.equal(media.mime, 'application/octet-stream');
  assert.equal(media.size, 4000000);
  const chunks = progress.filter((p) => p.id === media.id);
  assert.equal(chunks.length, 2, 'two chunks: 3 MiB and the rest');
  assert.deepEqual(chunks.map((c) => c.parts), [2, 2]);
  assert.equal(chunks.at(-1).received, 4000000);
  const got = new Uint8Array(await media.blob.arrayBuffer());
  assert.equal(got.length, 4000000);
  for (let i = 0; i < got.length; i++) {
    if (got[i] !== i % 251) assert.fail(`byte ${i} is ${got[i]}, not ${i % 251}`);
  }
});

test('a name over 200 characters is cut to 200 with its extension (G8); an id over 128 is refused', async () => {
  const long = 'n'.repeat(300) + '.bin';
  let id = null;
  const echo = waitFor(client, 'media', (d) => d.replyTo !== null && d.replyTo === id, 10000);
  id = client.sendFile(new Blob([new Uint8Array([1, 2, 3])]), { filename: long });
  const media = await echo; // what was sent is checked against the schema in after()
  assert.equal(media.filename, 'n'.repeat(196) + '.bin');
  assert.throws(() => client.sendFile(new Blob([new Uint8Array([1])]), { id: 'f'.repeat(129) }), (e) => e.code === 'bad_frame');
  assert.throws(() => client.sendText('hi', { id: 'm'.repeat(129) }), (e) => e.code === 'bad_frame');
  assert.throws(() => client.sendAudio(new Uint8Array([1]), { id: 'a'.repeat(129) }), (e) => e.code === 'bad_frame');
});
