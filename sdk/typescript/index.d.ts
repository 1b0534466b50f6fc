// Types of hermes-mobile-client: the Protocol v1 client (protocol.js, a copy of the gateway's
// web/protocol.js). Written by hand; the frame types come from frames.d.ts, which is generated
// from docs/protocol-v1.schema.json. Details of every option, method and event:
// docs/web-client.md ("protocol.js").

import type {
  AvatarState,
  Capabilities,
  DeviceItem,
  DownloadKind,
  ErrorCode,
  HistoryItem,
  PromptKind,
  ServerForgotten,
  ServerFrame,
  ServerPushSent,
  ServerPushSubscribed,
  ServerPushUnsubscribed,
  ServerReady,
  UploadKind,
} from './frames.js';

export * from './frames.js';

// ---- constants and helpers ----------------------------------------------------------------

/** G1: the most characters (Unicode scalar values, not bytes) of a text or caption: 12000. */
export declare const MAX_TEXT_CHARS: number;
/** One file, both directions: 8 MiB. */
export declare const MAX_MEDIA_BYTES: number;
/** One `audio` frame's recording: 8 MiB. */
export declare const MAX_AUDIO_BYTES: number;
/** U1: the protocol's largest chunk of a file (raw bytes): 3 MiB. */
export declare const MEDIA_CHUNK_BYTES: number;
/** What this client sends per `media` chunk: 512 KiB of raw bytes. */
export declare const UPLOAD_PART_BYTES: number;
/** The most chunks (`parts`) of one file: 2048. */
export declare const MAX_MEDIA_PARTS: number;
/** L59: the largest `history` page; history() cuts a larger `limit` to it: 200. */
export declare const HISTORY_MAX_LIMIT: number;
/** The options each card kind may have (P3); clarify's are `c0`, `c1`, … and `other`. */
export declare const PROMPT_OPTIONS: {
  readonly exec_approval: readonly string[];
  readonly slash_confirm: readonly string[];
  readonly clarify: null;
};

/** Codes of a HermesError: the gateway's error codes, and the client's own. */
export type HermesErrorCode =
  | ErrorCode
  | 'bad_config' // a bad option: no token, no WebSocket, no url outside a page
  | 'prompt_closed' // answer() to a card that is closed
  | 'offline' // a request (push, history, forget, devices, revoke) while not connected, or the connection lost before its answer
  | 'timeout' // a request not answered within requestTimeoutMs
  | 'read_failed' // a file could not be read
  | PairErrorCode // pairWithCode()
  | (string & {});

/** An error with a protocol-style `code` (too_big, bad_frame, prompt_closed, offline, …). */
export declare class HermesError extends Error {
  constructor(code: HermesErrorCode, message?: string);
  readonly name: 'HermesError';
  code: HermesErrorCode;
  /** Seconds to wait before trying again, when the gateway said (pairWithCode's `too_many_attempts`: its `Retry-After`). */
  retryAfter?: number;
}

/** Counts characters as G1 does: Unicode scalar values (code points). */
export declare function charCount(s: string): number;
/**
 * True when `s` holds a hidden character: Unicode Cf (bidi controls such as U+202E, zero-width
 * characters, ZWJ), Zl, Zp, or a control (Cc) other than TAB and LF. False for a non-string.
 */
export declare function hasHiddenChars(s: unknown): boolean;
/**
 * `s` with each hidden character replaced by a visible marker, `⟨U+202E⟩` (upper-case hex, at
 * least 4 digits). For display only: what a client sends back (an option id) never changes.
 */
export declare function revealHiddenChars(s: string): string;
/**
 * `s` cut at its hidden characters: text at even indices, markers (`⟨U+202E⟩`) at odd ones,
 * for a UI that styles the markers. `splitHiddenChars(s).join('') === revealHiddenChars(s)`.
 */
export declare function splitHiddenChars(s: string): string[];
/** A new device id, `web-` + 16 hex digits. Generate it once and keep it (H4). */
export declare function newDeviceId(): string;
/** A new frame id: `<prefix>-<time>-<random>`, time-ordered, well under 128 characters (G8). */
export declare function newId(prefix?: string): string;
/** `kind` for an upload, from its MIME type: image, video, audio, else document. */
export declare function kindFromMime(mime: string | null | undefined): UploadKind;
/** Checks a `prompt` frame (P3, P6) and returns a clean card, or null when it is not valid. */
export declare function validateCard(frame: unknown): PromptCard | null;
export declare function bytesToBase64(bytes: Uint8Array): string;
/** Throws on invalid base64. */
export declare function base64ToBytes(b64: string): Uint8Array;
/** Base64url without padding (RFC 4648 §5), as Web Push keys travel. */
export declare function bytesToBase64Url(bytes: Uint8Array): string;
/** Decodes base64url or base64, with or without padding. Throws on anything else. */
export declare function base64UrlToBytes(s: string): Uint8Array;

// ---- pairing (issue 26, docs/security.md) --------------------------------------------------

/** Why pairWithCode() failed: the `code` of the HermesError it rejects with. */
export type PairErrorCode =
  | 'forbidden' // 403: a wrong, spent or expired code (ask the owner for a new one)
  | 'too_many_attempts' // 429: more than 10 failed attempts in a minute from this address; see `retryAfter`
  | 'bad_request' // 400: a device id that is not valid (hidden characters, too long); also an empty code, before any request
  | 'full' // 409: 256 devices are paired already; revoke one first
  | 'owner_device' // 409: the id is an owner device's, and the code is not an owner's (`pair --owner`)
  | 'unavailable' // 503: the gateway keeps no journal, so it cannot pair; also a gateway older than pairing codes
  | 'not_kept' // 500 (not saved; the code is spent) or 503 busy (may still be kept later): run `hermes-mobile pair` again
  | 'network'; // the gateway could not be reached

/** The device that pairs (`POST /pair`'s `device`). Every field may be left out. */
export interface PairDevice {
  /** The device id to pair; left out or empty, the gateway makes one and returns it. A device already paired under this id gets a new token, and its old one stops working. */
  id?: string;
  /** Shown in the device list (`hermes-mobile devices`, the Devices panel). */
  name?: string;
  /** `android`, `ios`, `web`, … */
  platform?: string;
}

/** What pairWithCode() resolves to: a token of this device's own, and the device id it is bound to. */
export interface PairResult {
  /** The device token (256 bits, base64url). Keep it, like a password; it works only with `deviceId`. */
  token: string;
  /** The device id the token is bound to: pass it as `deviceId` every time. */
  deviceId: string;
}

/**
 * Trades a pairing code for a device token: `POST <baseUrl>/pair` (issue 26). The code comes
 * from `hermes-mobile pair` (the `#pair=<code>` of its link or QR code); it is single-use and
 * expires (10 minutes by default). `baseUrl` is the gateway's http(s) origin, where its chat
 * page is served (`http://192.168.1.20:8787`; empty in a page: the page's own). Keep the
 * token and the device id, never the code, and connect with both:
 * `new HermesClient({ token, deviceId })`. Rejects with a HermesError whose `code` is a
 * PairErrorCode, and `retryAfter` (seconds) for `too_many_attempts`.
 */
export declare function pairWithCode(baseUrl: string, code: string, device?: PairDevice): Promise<PairResult>;

// ---- options ------------------------------------------------------------------------------

/** What the client needs of a WebSocket: the browser's, Node 22+'s global one, or `ws`'s. */
export interface WebSocketLike {
  readonly readyState: number;
  readonly bufferedAmount: number;
  binaryType: string;
  onopen: ((event: any) => unknown) | null;
  onmessage: ((event: any) => unknown) | null;
  onclose: ((event: any) => unknown) | null;
  onerror: ((event: any) => unknown) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket class: `WebSocket` (browsers, Node 22+) or `import { WebSocket } from 'ws'`. */
export type WebSocketClass = new (url: string) => WebSocketLike;

/** Something with addEventListener/removeEventListener: a page's `document` or `window`. */
export interface LifecycleTarget {
  addEventListener(type: string, listener: (event: any) => void): void;
  removeEventListener(type: string, listener: (event: any) => void): void;
}

/**
 * Where the application keeps the journal seq (issue 24): the highest seq the client holds
 * everything up to. `load` is called once, before the first `hello` (which resumes after it);
 * `save` each time it grows (often: make it cheap, or debounce it). A store that throws or
 * rejects on load counts as 0: the gateway then replays everything it keeps.
 */
export interface SeqStore {
  load(): number | Promise<number>;
  save(seq: number): void | Promise<void>;
}

/**
 * Whose events wake the client: `document`'s `visibilitychange` and `resume`, `window`'s
 * `pageshow` (from the back/forward cache) and `online` call `resume()`. While
 * `document.visibilityState` is `hidden` no reconnect is scheduled.
 */
export interface Lifecycle {
  document?: (LifecycleTarget & { readonly visibilityState?: string; readonly hidden?: boolean }) | null;
  window?: LifecycleTarget | null;
}

export interface HermesClientOptions {
  /**
   * The credential; sent only in `hello`. Required. A device token from pairWithCode() (then
   * `deviceId` must be the id it is bound to), or the shared app token (`hermes-mobile token`).
   */
  token: string;
  /** The gateway's WebSocket, `ws://host:8787/ws`. Default (pages only): `ws(s)://<location.host>/ws`. */
  url?: string;
  /** Keep it and pass it every time (H4). Default: a new `web-<hex>`. */
  deviceId?: string;
  /** `hello.device.name`. Default `"Web browser"`. */
  deviceName?: string;
  /** `hello.device.platform`. Default `"web"`. */
  platform?: string;
  /** `hello.device.app_version`. Default `"1.0.0"`. */
  appVersion?: string;
  /** `hello.user`. */
  user?: { id?: string; name?: string } | null;
  /** Keep-alive `ping` interval (K1/K2); silent for two intervals + 10 s: reconnect. Default 25000. */
  pingIntervalMs?: number;
  /** Reconnect delay `min(max, min·2^attempt)` × a random factor in [0.5, 1]. Defaults 500, 15000. */
  backoffMinMs?: number;
  backoffMaxMs?: number;
  /** How long after its last activity an unconfirmed message is re-sent after a reconnect. Default 60000. */
  resendWindowMs?: number;
  /**
   * Also re-send confirmed messages of the window (default false: a gateway restart would deliver
   * them twice). Only with a gateway without a journal: with one, `received` means on disk.
   */
  resendConfirmed?: boolean;
  /**
   * Keeps the journal seq across restarts of the application, so that `hello` resumes after it
   * and nothing is missed or shown twice. Without it the seq lives as long as the client: a new
   * client resumes after 0 (the gateway replays everything it keeps).
   */
  seqStore?: SeqStore | null;
  /** No `ready` this long after the socket opened: reconnect. Default 20000. */
  readyTimeoutMs?: number;
  /** The least time between two `typing` frames. Default 2000. */
  typingIntervalMs?: number;
  /** How long a request (push*, history, forget, devices, revoke) waits for its answer. Default 15000. */
  requestTimeoutMs?: number;
  /** After resume() on an open socket, how long its pong may take. Default 5000. */
  wakeCheckMs?: number;
  /** The page's `{document, window}` (the default where they exist; none in Node); `false` for none. */
  lifecycle?: Lifecycle | false | null;
  /** The WebSocket class. Default `globalThis.WebSocket`; in Node < 22 pass `ws`'s. */
  WebSocket?: WebSocketClass;
}

// ---- cards --------------------------------------------------------------------------------

export interface PromptCardOption {
  /** Lower case: once, session, always, deny; once, always, cancel; c0, c1, …, other. */
  id: string;
  label: string;
  style: 'primary' | 'danger' | '';
}

/** A card as validateCard() and the `prompt` event give it. */
export interface PromptCard {
  id: string;
  kind: PromptKind;
  text: string;
  /** Only the options allowed for the kind (P3); never empty. */
  options: PromptCardOption[];
  /** exec_approval: the exact command. '' otherwise. */
  command: string;
  description: string;
  session: string;
  /**
   * text, command, description or a label holds a hidden character (the frame's
   * `hidden_chars`, or this client's own check): show them with revealHiddenChars() and a
   * warning, so the person sees what they approve (Trojan Source).
   */
  hiddenChars: boolean;
  /** Seconds it had left when it came (300 when the frame said none); 0 for a card a journal replays as closed since: its `promptdone` follows. */
  timeoutSeconds: number;
  /** When it expires, ms since the epoch. */
  expiresAt: number;
  state: 'open' | 'done' | 'expired';
  /** What this client answered, if it did. */
  answer: { optionId: string; text: string } | null;
  /** How it closed (`promptdone`). */
  result: { optionId: string | null; expired: boolean; label: string | null } | null;
}

// ---- events -------------------------------------------------------------------------------

/** idle → connecting → online → offline (retrying) | noaccess | closed. */
export type ConnectionState = 'idle' | 'connecting' | 'online' | 'offline' | 'noaccess' | 'closed';

export interface StatusDetail {
  state: ConnectionState;
  /** connecting, offline: the reconnect attempt (0 first). */
  attempt?: number;
  /** offline: when the next attempt starts (ms since the epoch); 0 when none is scheduled. */
  retryAt?: number;
  retryInMs?: number;
  /** offline: why (`replaced`: another connection took the device, no automatic retry; a close reason or code). */
  reason?: string;
  /** offline: true when the page is hidden, so no retry is scheduled until it is shown. */
  paused?: boolean;
  /** noaccess: `auth_failed` or `forbidden`; never retried. */
  code?: 'auth_failed' | 'forbidden';
  /** noaccess: the gateway's message, e.g. "too many failed attempts; try again in 4 s". */
  message?: string;
}

export interface ReadyDetail {
  v: ServerReady['v'];
  session: string;
  device: ServerReady['device'];
  avatarUrl: string;
  capabilities: Partial<Capabilities>;
  /** The device's latest journal seq; null from a gateway without a journal. */
  seq: number | null;
  /** What this connection's hello resumed after (null without a journal): the replay follows, then `resumed`. */
  resumeAfter: number | null;
}

export interface ResumedDetail {
  /** The device's latest seq. The client keeps the highest seq it has seen, which may be lower. */
  seq: number | null;
  /** What the hello resumed after. */
  after: number;
}

/** A page of the device's journal: items oldest first; `more` when older ones remain. */
export interface HistoryPage {
  items: HistoryItem[];
  more: boolean;
}

export interface MessageDetail {
  id: string;
  /** One bubble per key: `id`, or `id#n` when an id comes again after its message was final. */
  key: string;
  /** The whole current text: chunks joined (M1), the latest version replacing the one before (M2). */
  text: string;
  /** The message is complete and will not change. */
  final: boolean;
  edit: boolean;
  /** All chunks of the current version have arrived. */
  complete: boolean;
  /** 1 for the first version, +1 for each edit. */
  version: number;
  chunk: { index: number; total: number };
  /** This version's journal seq (null without a journal); all its chunks carry it. */
  seq: number | null;
}

export interface MediaMeta {
  id: string;
  kind: DownloadKind;
  mime: string;
  filename: string;
  caption: string;
  size: number;
  /** The id of the upload this file answers (the demo agent echoes uploads back). */
  replyTo: string | null;
  /** The file's journal seq (null without a journal). */
  seq: number | null;
}

export interface MediaDetail extends MediaMeta {
  /**
   * The reassembled file; null for a `url` file, and for a file replayed from the journal whose
   * bytes the gateway no longer holds (its metadata alone: then `url` is null too).
   */
  blob: Blob | null;
  /** A link to fetch; null when the bytes came in the frames. */
  url: string | null;
}

export interface MediaProgressDetail extends MediaMeta {
  /** Bytes received so far. */
  received: number;
  part: number;
  parts: number;
  /** Chunks received so far. */
  got: number;
}

export interface PromptDetail {
  card: PromptCard;
  /** An open card sent again after a reconnect (H5). */
  repeat: boolean;
  /** The seq of the card's opening (null without a journal). */
  seq: number | null;
}

export interface PromptDoneDetail {
  id: string;
  optionId: string | null;
  expired: boolean;
  label: string | null;
  card: PromptCard | null;
  /** The seq of the card's closing (null without a journal). */
  seq: number | null;
}

export interface AvatarDetail {
  state: AvatarState;
}

export interface TypingDetail {
  active: boolean;
}

export type PushRequestType = 'push_subscribe' | 'push_unsubscribe' | 'push_test';
/** The requests whose answer (or error) settles a promise. */
export type RequestType = PushRequestType | 'history' | 'forget' | 'devices' | 'revoke';

export interface ErrorDetail {
  code: ErrorCode | (string & {});
  message: string;
  fatal: boolean;
  /** The offending frame's id (G9). */
  id: string | null;
  /** When the error answered a card. */
  promptId: string | null;
  /** When it answered a push request, whose promise it also rejects. */
  request?: RequestType;
}

/** What goes through the outbox. */
export type OutboxType = 'text' | 'media' | 'audio' | 'prompt';

export interface OutboxDetail {
  id: string;
  type: OutboxType;
}

export interface ConfirmedDetail extends OutboxDetail {
  /** The journal's `received` seq; null when a pong confirmed it (no journal, or a card's answer). */
  seq: number | null;
}

export interface QueuedDetail extends OutboxDetail {
  online: boolean;
}

export interface RejectedDetail extends OutboxDetail {
  code: string;
  message: string;
  promptId?: string | null;
}

export interface UploadProgress {
  id: string;
  loaded: number;
  total: number;
  /** 0 to 99 while sending; 100 once the gateway has confirmed the file. */
  percent: number;
}

export interface FrameDetail {
  /** Every frame received, as it came, before it is handled (not validated). */
  frame: ServerFrame;
}

export interface InvalidDetail {
  reason: string;
  frame?: unknown;
}

/** Every event of HermesClient and its `detail`. */
export interface HermesClientEventMap {
  status: StatusDetail;
  ready: ReadyDetail;
  resumed: ResumedDetail;
  message: MessageDetail;
  media: MediaDetail;
  mediaprogress: MediaProgressDetail;
  prompt: PromptDetail;
  promptdone: PromptDoneDetail;
  avatar: AvatarDetail;
  typing: TypingDetail;
  error: ErrorDetail;
  queued: QueuedDetail;
  sent: OutboxDetail;
  confirmed: ConfirmedDetail;
  rejected: RejectedDetail;
  unsent: OutboxDetail;
  uploadprogress: UploadProgress;
  frame: FrameDetail;
  invalid: InvalidDetail;
}

export type HermesEventType = keyof HermesClientEventMap;

/** The events are CustomEvents; `detail` holds the data. */
export type HermesEvent<D> = CustomEvent<D>;

export type HermesEventListener<K extends HermesEventType> =
  | ((event: HermesEvent<HermesClientEventMap[K]>) => void)
  | { handleEvent(event: HermesEvent<HermesClientEventMap[K]>): void };

export interface ListenerOptions {
  once?: boolean;
  passive?: boolean;
  capture?: boolean;
  signal?: AbortSignal;
}

// ---- the client ---------------------------------------------------------------------------

export interface SendFileOptions {
  /** Default: from the MIME type (image, video, audio, else document). */
  kind?: UploadKind;
  /** Default: the Blob's type. */
  mime?: string;
  /** Default: the File's name, else "file". */
  filename?: string;
  caption?: string;
  id?: string;
  onProgress?: (progress: UploadProgress) => void;
}

export interface SendAudioOptions {
  format?: 'wav' | 'ogg';
  /** Text recognized on the device, if any. */
  text?: string;
  id?: string;
}

/** A key as base64(url) text or bytes. */
export type PushKey = string | ArrayBuffer | ArrayBufferView;

/** A browser PushSubscription, its toJSON(), or the same by hand. */
export interface PushSubscriptionLike {
  endpoint: string;
  keys?: { p256dh: PushKey; auth: PushKey };
  getKey?(name: 'p256dh' | 'auth'): ArrayBuffer | null;
  toJSON?(): { endpoint?: string; keys?: Record<string, string> };
}

/**
 * The Protocol v1 client. It is an EventTarget: every event is a CustomEvent whose data is in
 * `detail` (HermesClientEventMap). See docs/web-client.md.
 */
export declare class HermesClient {
  constructor(options: HermesClientOptions);

  /** Opens the connection (again), resetting the backoff. */
  connect(): void;
  /** Skips the backoff wait while offline. Does nothing after `replaced`, until connect(). */
  reconnectNow(): void;
  /**
   * The app is in front again: reconnect now, or ping an open socket and replace it if it stays
   * silent for wakeCheckMs. Does nothing after `replaced` or `noaccess`.
   */
  resume(): void;
  /** Closes for good; state `closed`. Queued messages are kept until connect(). */
  close(): void;

  /** Sends a text (queued while offline); returns its id. Throws HermesError bad_frame / too_big. */
  sendText(text: string, options?: { id?: string }): string;
  /** Sends a file as `media` chunks with one id; returns the id. Throws too_big over 8 MiB. */
  sendFile(file: Blob, options?: SendFileOptions): string;
  /** Sends a voice recording (`audio`: wav or ogg, at most 8 MiB); returns the id. */
  sendAudio(recording: Blob | ArrayBuffer | ArrayBufferView, options?: SendAudioOptions): string;
  /**
   * Answers a card with one of its options (and clarify's `other` with text); returns the frame
   * id. Throws HermesError prompt_closed (a closed card) or bad_frame (not an option).
   */
  answer(promptId: string, optionId: string | null, text?: string): string;
  /** A `typing` frame, at most every typingIntervalMs, only while online; true if sent. */
  typing(): boolean;
  /** An `ack` frame (the gateway ignores it). */
  ack(id: string): void;

  /** `push_subscribe` → `push_subscribed`; rejects with a HermesError (forbidden, bad_frame, offline, timeout). */
  pushSubscribe(subscription: PushSubscriptionLike, appUrl?: string): Promise<ServerPushSubscribed>;
  /** `push_unsubscribe` → `push_unsubscribed`. */
  pushUnsubscribe(): Promise<ServerPushUnsubscribed>;
  /** `push_test` → `push_sent`; a refusal's message names the push service's answer. */
  pushTest(): Promise<ServerPushSent>;
  /**
   * A page of this device's journal (L59): up to `limit` (1 to 200; default the gateway's 50)
   * entries with seq below `before` (the newest without it), oldest first. Rejects with a
   * HermesError: `unsupported_frame` (the gateway keeps no history), `bad_frame`, `offline`, `timeout`.
   */
  history(before?: number | null, limit?: number | null): Promise<HistoryPage>;
  /**
   * `forget` → `forgotten` (L60): the gateway drops this device's journal (open cards excepted),
   * what it holds for it and its push subscriptions. The seq goes on where it was.
   */
  forget(): Promise<ServerForgotten>;
  /**
   * `devices` → `devices` (issue 26): every paired device, ordered by id, with when it paired
   * and was last seen, whether it is online, has a push subscription, is an owner. Only for an
   * owner connection (the shared token, or a device paired with `hermes-mobile pair --owner`).
   * Rejects with a HermesError: `forbidden` (not an owner), `offline`, `timeout`.
   */
  devices(): Promise<DeviceItem[]>;
  /**
   * `revoke` → `revoked` (issue 26): the device's token stops working, its live connections
   * are closed (`auth_failed`), its push subscriptions and what the gateway holds for it are
   * deleted; resolves once that is on the gateway's disk. Owner connections only. Rejects with
   * a HermesError: `forbidden` (not an owner), `bad_frame` (no paired device with that id),
   * `offline`, `timeout`. Revoking the device this client is connected as ends its own
   * connection too (`noaccess`, `auth_failed`).
   */
  revoke(deviceId: string): Promise<void>;

  /** The device id in use (the option, or the one generated): keep it. */
  readonly deviceId: string;
  readonly state: ConnectionState;
  /** True between `ready` and the connection's end. */
  readonly online: boolean;
  /** True after the gateway closed the connection as `replaced` (H5), until connect(). */
  readonly replaced: boolean;
  /** The last `ready` frame. */
  readonly ready: ServerReady | null;
  /** The last `ready` frame's capabilities ({} before the first). */
  readonly capabilities: Partial<Capabilities>;
  /** The highest journal seq this client holds everything up to (0 for none); sent as `hello.resume.after`. */
  readonly seq: number;
  /** The last `ready` carried `seq`: the gateway keeps a journal, and `received` confirms sends. */
  readonly journal: boolean;
  /** Between such a `ready` and its `resumed`: what arrives is the replay of what was missed. */
  readonly replaying: boolean;
  /** The gateway keeps history (`ready.capabilities.history`): history() may be asked. */
  readonly hasHistory: boolean;
  /** The gateway's VAPID public key (base64url), or '' when it sends no pushes. */
  readonly webPushKey: string;
  /** Which buttons a card's notification has (`capabilities.push.actions`, issue 25): `''` when the gateway does not say. */
  readonly notifyActions: 'safe' | 'all' | 'off' | '';
  /** Ids of messages not yet confirmed by the gateway, in order. */
  readonly pending: string[];
  /** Cards by id. */
  readonly prompts: Map<string, PromptCard>;
  /** Limits, from `ready.capabilities` when it has them. */
  readonly maxTextChars: number;
  readonly maxMediaBytes: number;

  addEventListener<K extends HermesEventType>(type: K, listener: HermesEventListener<K> | null, options?: boolean | ListenerOptions): void;
  removeEventListener<K extends HermesEventType>(type: K, listener: HermesEventListener<K> | null, options?: boolean | { capture?: boolean }): void;
  dispatchEvent(event: Event): boolean;
}
