// A small terminal chat on hermes-mobile-client: type a line to send it, see streamed replies
// grow, answer cards by number. Node 22+ (its global WebSocket), or Node 20 with `ws` installed
// (or `node --experimental-websocket`).
//
// In a project with hermes-mobile-client installed (test/pack.test.mjs does just that), compile
// it with tsc (module NodeNext, strict) and run: node chat.js --url ws://127.0.0.1:8787/ws --token TOKEN
//
// Lines: any text is sent; a number (or an option id) answers the open card; `/file PATH`
// sends a file; `/history` shows the last 20 entries the gateway keeps; `/quit` leaves.
// Received files are saved with --save DIR. With --seq-file PATH it resumes where it stopped
// last time (the journal's seq is kept in that file): nothing missed, nothing twice.
import { createInterface } from 'node:readline';
import { readFileSync, writeFileSync } from 'node:fs';
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { HermesClient, HermesError, type PromptCard, type WebSocketClass } from 'hermes-mobile-client';

function arg(name: string, env: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : process.env[env];
}

// Node 22+ and browsers have a global WebSocket; older Node needs the `ws` package.
async function webSocketClass(): Promise<WebSocketClass> {
  if (typeof globalThis.WebSocket === 'function') return globalThis.WebSocket;
  const name = 'ws'; // not a literal: the example type-checks without ws installed
  const ws = (await import(name)) as { WebSocket: WebSocketClass };
  return ws.WebSocket;
}

const url = arg('url', 'HERMES_URL') ?? 'ws://127.0.0.1:8787/ws';
const token = arg('token', 'HERMES_TOKEN');
const saveDir = arg('save', 'HERMES_SAVE_DIR');
const seqFile = arg('seq-file', 'HERMES_SEQ_FILE');
if (!token) {
  console.error('usage: chat --url ws://HOST:8787/ws --token TOKEN [--device ID] [--save DIR] [--seq-file PATH]');
  process.exit(2);
}

// The journal's seq in a file: read once before the first hello, written as it grows.
const seqStore = seqFile
  ? {
      load: (): number => {
        try {
          return Number(readFileSync(seqFile, 'utf8')) || 0;
        } catch {
          return 0; // no file yet: everything the gateway keeps is replayed
        }
      },
      save: (n: number): void => writeFileSync(seqFile, String(n)),
    }
  : null;

const client = new HermesClient({
  url,
  token,
  deviceId: arg('device', 'HERMES_DEVICE') ?? 'cli-example',
  deviceName: 'Terminal',
  platform: 'node',
  WebSocket: await webSocketClass(),
  seqStore,
});

// A streamed reply grows in place: print what was added; a rewrite starts a new line.
const shown = new Map<string, string>();
// The newest open card, which a number typed answers.
const openCard = (): PromptCard | undefined => [...client.prompts.values()].reverse().find((c) => c.state === 'open');

client.addEventListener('status', (e) => {
  const { state, retryInMs, code } = e.detail;
  if (state === 'offline' && retryInMs) console.log(`[offline, retrying in ${Math.round(retryInMs / 1000)} s]`);
  if (state === 'noaccess') {
    console.error(`[no access: ${code}; check the token]`);
    process.exit(4);
  }
});
client.addEventListener('ready', (e) => console.log(`[online as ${e.detail.session}]`));
client.addEventListener('message', (e) => {
  const { key, text, final } = e.detail;
  const before = shown.get(key);
  if (before === undefined) process.stdout.write('hermes: ' + text);
  else if (text.startsWith(before)) process.stdout.write(text.slice(before.length));
  else process.stdout.write('\nhermes: ' + text);
  shown.set(key, text);
  if (final) {
    process.stdout.write('\n');
    shown.delete(key);
  }
});
client.addEventListener('prompt', (e) => {
  const card = e.detail.card;
  console.log(`[card] ${card.text}${card.command ? `\n  $ ${card.command}` : ''}`);
  card.options.forEach((o, i) => console.log(`  ${i + 1}) ${o.label}`));
});
client.addEventListener('promptdone', (e) => {
  const { expired, label } = e.detail;
  console.log(expired ? '[card expired]' : `[card answered: ${label}]`);
});
client.addEventListener('media', async (e) => {
  const { filename, size, blob, url: link } = e.detail;
  if (!blob) return console.log(`[file at ${link}]`);
  if (!saveDir) return console.log(`[file ${filename}, ${size} bytes]`);
  await mkdir(saveDir, { recursive: true });
  const path = join(saveDir, basename(filename || 'file'));
  await writeFile(path, new Uint8Array(await blob.arrayBuffer()));
  console.log(`[saved ${path}, ${size} bytes]`);
});
client.addEventListener('rejected', (e) => console.log(`[not sent: ${e.detail.code} ${e.detail.message}]`));
client.addEventListener('error', (e) => {
  if (!e.detail.request) console.log(`[error ${e.detail.code}: ${e.detail.message}]`);
});

client.connect();

const lines = createInterface({ input: process.stdin });
for await (const raw of lines) {
  const line = raw.trim();
  if (!line) continue;
  try {
    if (line === '/quit') break;
    if (line === '/history') {
      const { items, more } = await client.history(null, 20);
      if (more) console.log('[…]');
      for (const item of items) {
        const who = 'from' in item && item.from === 'user' ? 'you' : 'hermes';
        const what = 'text' in item && item.text ? item.text : item.t === 'media' ? `[file ${item.filename}]` : `[${item.t}]`;
        console.log(`${item.seq}. ${who}: ${what}`);
      }
      continue;
    }
    if (line.startsWith('/file ')) {
      const path = line.slice(6).trim();
      const bytes = await readFile(path);
      client.sendFile(new Blob([bytes]), {
        filename: basename(path),
        onProgress: (p) => {
          if (p.percent === 100) console.log(`[sent ${basename(path)}]`);
        },
      });
      continue;
    }
    const card = openCard();
    if (card) {
      const n = Number(line);
      const option = Number.isInteger(n) ? card.options[n - 1] : card.options.find((o) => o.id === line.toLowerCase());
      if (option) {
        client.answer(card.id, option.id);
        continue;
      }
    }
    client.sendText(line);
  } catch (err) {
    console.log(err instanceof HermesError ? `[${err.code}: ${err.message}]` : `[${String(err)}]`);
  }
}
client.close();
process.exit(0);
