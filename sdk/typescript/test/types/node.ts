// Type-level checks of index.d.ts and frames.d.ts under Node's types (no DOM lib): compiled by
// `tsc --noEmit --strict` (scripts/typecheck.mjs), never run.
import {
  HermesClient,
  HermesError,
  MAX_TEXT_CHARS,
  PROMPT_OPTIONS,
  HISTORY_MAX_LIMIT,
  base64UrlToBytes,
  bytesToBase64Url,
  charCount,
  hasHiddenChars,
  kindFromMime,
  newDeviceId,
  newId,
  pairWithCode,
  revealHiddenChars,
  splitHiddenChars,
  validateCard,
  type ClientFrame,
  type ClientFrameMap,
  type ConnectionState,
  type DeviceItem,
  type HermesClientEventMap,
  type HistoryPage,
  type MessageDetail,
  type PairErrorCode,
  type PairResult,
  type PromptCard,
  type ServerFrame,
  type ServerFrameMap,
  type ServerForgotten,
  type ServerPushSubscribed,
  type UploadKind,
} from 'hermes-mobile-client';
import type { ServerMessage } from 'hermes-mobile-client/frames';

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function expectType<T extends true>(_ok: T): void {}

// A fake WebSocket class is accepted structurally.
class FakeSocket {
  readyState = 0;
  bufferedAmount = 0;
  binaryType = 'blob';
  onopen: ((e: unknown) => void) | null = null;
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onclose: ((e: { code: number; reason: string }) => void) | null = null;
  onerror: ((e: unknown) => void) | null = null;
  constructor(readonly url: string) {}
  send(_data: string): void {}
  close(): void {}
}

const client = new HermesClient({ token: 't'.repeat(16), url: 'ws://127.0.0.1:1/ws', WebSocket: FakeSocket, lifecycle: false });
// Node 22's global WebSocket (@types/node) fits too.
new HermesClient({ token: 'x', url: 'ws://h/ws', WebSocket: globalThis.WebSocket });

client.addEventListener('message', (e) => {
  expectType<Equal<typeof e.detail, MessageDetail>>(true);
  const final: boolean = e.detail.final;
  void final;
});
client.addEventListener('status', (e) => {
  const s: ConnectionState = e.detail.state;
  if (s === 'noaccess') {
    const code: 'auth_failed' | 'forbidden' | undefined = e.detail.code;
    void code;
  }
});
client.addEventListener('prompt', ({ detail: { card, repeat } }) => {
  if (!repeat && card.state === 'open') client.answer(card.id, card.options[0]!.id);
});
client.addEventListener('media', async (e) => {
  if (e.detail.blob) {
    const bytes = new Uint8Array(await e.detail.blob.arrayBuffer());
    void bytes;
  }
});
client.addEventListener('frame', (e) => {
  const f: ServerFrame = e.detail.frame;
  if (f.t === 'message') {
    expectType<Equal<typeof f, ServerMessage>>(true);
    const total: number = f.chunk.total;
    void total;
  }
});
client.addEventListener('uploadprogress', (e) => void e.detail.percent);
client.addEventListener('error', (e) => void (e.detail.request satisfies 'push_subscribe' | 'push_unsubscribe' | 'push_test' | 'history' | 'forget' | 'devices' | 'revoke' | undefined));
// @ts-expect-error: not an event of HermesClient
client.addEventListener('nope', () => {});

const id: string = client.sendText('hello');
client.sendFile(new Blob([new Uint8Array(3)]), { filename: 'a.bin', onProgress: (p) => void p.loaded });
client.sendAudio(new Uint8Array(10), { format: 'wav' });
// @ts-expect-error: only wav or ogg
client.sendAudio(new Uint8Array(10), { format: 'mp3' });
const subscribed: Promise<ServerPushSubscribed> = client.pushSubscribe({ endpoint: 'https://fcm.googleapis.com/fcm/send/x', keys: { p256dh: new Uint8Array(65), auth: 'AAAAAAAAAAAAAAAAAAAAAA' } });
void subscribed;
const cards: Map<string, PromptCard> = client.prompts;
const pending: string[] = client.pending;
// @ts-expect-error: state is read-only
client.state = 'online';
void [id, cards, pending, client.online, client.replaced, client.webPushKey, client.capabilities.max_text_chars, client.ready?.session];

// The journal (issue 24): a seq store, sync or async; history pages; forget; resumed.
let kept = 0;
new HermesClient({ token: 'x', url: 'ws://h/ws', WebSocket: FakeSocket, seqStore: { load: () => kept, save: (n) => void (kept = n) } });
new HermesClient({ token: 'x', url: 'ws://h/ws', WebSocket: FakeSocket, seqStore: { load: async () => 7, save: async () => {} } });
// @ts-expect-error: load must give a number
new HermesClient({ token: 'x', url: 'ws://h/ws', WebSocket: FakeSocket, seqStore: { load: () => 'seven', save: () => {} } });
async function journal(): Promise<void> {
  const page = await client.history(client.seq, 100);
  for (const item of page.items) {
    if (item.t === 'message') void (item.text satisfies string);
    else if (item.t === 'text') void (item.from satisfies 'user');
    void (item.seq satisfies number);
  }
  const more: boolean = page.more;
  const older: HistoryPage = await client.history();
  const gone: ServerForgotten = await client.forget();
  void [more, older, gone, client.journal, client.replaying, client.hasHistory];
}
void journal;
client.addEventListener('resumed', (e) => void (e.detail.after satisfies number));
client.addEventListener('ready', (e) => void (e.detail.seq satisfies number | null));
client.addEventListener('confirmed', (e) => void (e.detail.seq satisfies number | null));
client.addEventListener('message', (e) => void (e.detail.seq satisfies number | null));
const limit: number = HISTORY_MAX_LIMIT;
void limit;

try {
  client.answer('p-1', 'once');
} catch (err) {
  if (err instanceof HermesError) void err.code;
}

const kind: UploadKind = kindFromMime('image/png');
const n: number = charCount('héllo') + MAX_TEXT_CHARS;
const card: PromptCard | null = validateCard({ t: 'prompt' });
const opts: readonly string[] = PROMPT_OPTIONS.exec_approval;
const bytes: Uint8Array = base64UrlToBytes(bytesToBase64Url(new Uint8Array(2)));
void [kind, n, card, opts, bytes, newDeviceId(), newId('x')];
// Hidden characters: a card says whether it holds any; the helpers only display.
const hidden: boolean = hasHiddenChars(card?.command) || (card?.hiddenChars ?? false);
const shown: string = revealHiddenChars('rm \u202e');
const parts: string[] = splitHiddenChars(shown);
// @ts-expect-error: revealHiddenChars takes a string
revealHiddenChars(42);
void [hidden, parts];

// Frames: the generated types.
const hello: ClientFrame = { t: 'hello', token: 'secret', device: { id: 'phone-1' } };
const answer: ClientFrameMap['prompt'] = { t: 'prompt', prompt_id: 'p-1', option_id: 'once' };
// @ts-expect-error: an answer needs option_id or text
const empty: ClientFrameMap['prompt'] = { t: 'prompt', prompt_id: 'p-1' };
const types: Array<keyof ServerFrameMap> = ['ready', 'message', 'push_subscribed'];
const events: Array<keyof HermesClientEventMap> = ['status', 'promptdone', 'mediaprogress'];
void [hello, answer, empty, types, events];

// Paired devices (issue 26): pairing with a code, the device list and revocation.
async function pairing(): Promise<void> {
  const paired: PairResult = await pairWithCode('http://192.168.1.20:8787', 'x'.repeat(22), { name: 'Pixel', platform: 'android' });
  await pairWithCode('http://h', 'code');
  // @ts-expect-error: the device is an object, not its id
  await pairWithCode('http://h', 'code', 'tel-1');
  const mine = new HermesClient({ token: paired.token, deviceId: paired.deviceId, url: 'ws://h/ws', WebSocket: FakeSocket });
  const items: DeviceItem[] = await mine.devices();
  for (const d of items) {
    const seen: number | null = d.last_seen;
    void [d.id satisfies string, d.name, d.platform, d.paired_at satisfies number, seen, d.online satisfies boolean, d.push, d.owner];
  }
  const done: void = await mine.revoke(items[0]!.id);
  // @ts-expect-error: revoke takes the device id, a string
  await mine.revoke({ id: 'tel-1' });
  void done;
  try {
    await pairWithCode('http://h', 'code');
  } catch (e) {
    if (e instanceof HermesError) {
      const wait: number | undefined = e.retryAfter;
      const why: PairErrorCode = 'too_many_attempts';
      void [wait, why, e.code === why];
    }
  }
}
void pairing;
