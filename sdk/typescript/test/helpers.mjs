// Shared by the tests: the real release gateway (one per test file), the `ws` WebSocket from
// the dev-tools cache, a scripted socket on which a test plays the gateway, and bounded waits
// for client events.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { HermesClient } from 'hermes-mobile-client';
import { packageDir, requireDev } from '../scripts/cache.mjs';

export const GATEWAY_BIN = process.env.GATEWAY_BIN || resolve(packageDir, '../../target/release/hermes-mobile');
export const TOKEN = 'sdk-ts-test-token-0123456789';

/** `ws`'s WebSocket class (a devDependency, from the cache). */
export const WS = requireDev('ws').WebSocket;

// Every frame a test client sends or receives through TapSocket is validated against
// docs/protocol-v1.schema.json (ClientFrame, ServerFrame) with Ajv; each file's after() calls
// assertFramesValid().
const schemaPath = resolve(packageDir, '../../docs/protocol-v1.schema.json');
const validators = (() => {
  if (!existsSync(schemaPath)) throw new Error(`no schema at ${schemaPath}`);
  const Ajv2020 = requireDev('ajv/dist/2020').default;
  // strict: the schema must also compile for a user who turns Ajv's strict mode on.
  const ajv = new Ajv2020({ strict: true, allErrors: true, validateFormats: false });
  const schema = JSON.parse(readFileSync(schemaPath, 'utf8'));
  ajv.addSchema(schema);
  return { client: ajv.getSchema(`${schema.$id}#/$defs/ClientFrame`), server: ajv.getSchema(`${schema.$id}#/$defs/ServerFrame`) };
})();
const violations = [];
const checked = { client: 0, server: 0 };

const refusals = []; // [predicate, times matched]: frames a test sends malformed on purpose

/** The schema must refuse the frames `pred` matches (a test sends them malformed on purpose). */
export function expectSchemaRefusal(pred) {
  refusals.push([pred, 0]);
}

function validate(direction, frame) {
  if (!validators) return;
  checked[direction]++;
  const v = validators[direction];
  const ok = v(frame);
  const short = () => JSON.stringify(frame, (k, x) => (typeof x === 'string' && x.length > 80 ? x.slice(0, 80) + '…' : x));
  const refusal = refusals.find(([pred]) => pred(frame));
  if (refusal) {
    refusal[1]++;
    if (ok) violations.push(`${direction} frame ${short()}: the schema should refuse it`);
  } else if (!ok) {
    violations.push(`${direction} frame ${short()}: ${v.errors.slice(0, 3).map((e) => `${e.instancePath} ${e.message}`).join('; ')}`);
  }
}

/** Validates one frame against the schema, as TapSocket does (for frames a test scripts itself). */
export function checkFrame(direction, frame) {
  validate(direction, frame);
}

/** Asserts that every frame seen so far validated against the schema (and that some were seen). */
export function assertFramesValid() {
  if (!validators) return;
  assert.deepEqual(violations, [], 'frames that do not validate against docs/protocol-v1.schema.json');
  assert.ok(checked.client > 0 && checked.server > 0, 'frames were validated');
  assert.ok(refusals.every(([, n]) => n > 0), 'every frame expected to be refused was seen');
}

/**
 * Starts the release gateway on a port it picks (MOBILE_PORT=0, read back from its log) with a
 * state directory of its own, and waits for /healthz. `env` adds settings.
 */
export async function startGateway(env = {}) {
  const stateDir = mkdtempSync(join(tmpdir(), 'hermes-sdk-ts-'));
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MOBILE_') && k !== 'RUST_LOG'));
  const proc = spawn(GATEWAY_BIN, [], {
    env: {
      ...clean,
      MOBILE_HOST: '127.0.0.1',
      MOBILE_PORT: '0',
      MOBILE_TOKEN: TOKEN,
      MOBILE_STATE_DIR: stateDir,
      MOBILE_ENV_FILE: '',
      MOBILE_DEMO_STEP: '0.02',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  const exited = new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })));
  const port = await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`the gateway did not say where it listens within 10 s:\n${log}`)), 10000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on ws:\/\/127\.0\.0\.1:(\d+)\/ws/.exec(log);
      if (m) {
        clearTimeout(timer);
        res(Number(m[1]));
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      rej(new Error(`the gateway (${GATEWAY_BIN}) exited (${code ?? signal}) before listening:\n${log}`));
    });
  });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 10000;
  for (;;) {
    try {
      const r = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2000) });
      if (r.status === 200) break;
    } catch {
      /* not yet */
    }
    if (Date.now() > deadline) throw new Error(`/healthz on port ${port} did not answer 200 within 10 s:\n${log}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port,
    base,
    url: `ws://127.0.0.1:${port}/ws`,
    token: TOKEN,
    stateDir,
    log: () => log,
    healthz: async () => (await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2000) })).json(),
    /** SIGTERM, and the exit within 5 s (else SIGKILL and a failure). */
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const timeout = new Promise((r) => setTimeout(() => r(null), 5000).unref());
      const result = await Promise.race([exited, timeout]);
      rmSync(stateDir, { recursive: true, force: true });
      if (result === null) {
        proc.kill('SIGKILL');
        throw new Error('the gateway did not exit within 5 s of SIGTERM');
      }
      if (result.code !== 0) throw new Error(`the gateway exited ${result.code ?? result.signal} after SIGTERM:\n${log}`);
    },
  };
}

let deviceCounter = 0;
const clients = new Set();

/** A HermesClient on the gateway with `ws`, no page lifecycle and a short backoff. */
export function newClient(gw, opts = {}) {
  const client = new HermesClient({
    url: gw.url,
    token: gw.token,
    deviceId: `sdk-ts-${process.pid}-${++deviceCounter}`,
    deviceName: 'sdk test',
    platform: 'node',
    WebSocket: TapSocket,
    lifecycle: false,
    backoffMinMs: 50,
    backoffMaxMs: 200,
    ...opts,
  });
  clients.add(client);
  return client;
}

/** Closes every client newClient() made (call it in after()). */
export function closeClients() {
  for (const c of clients) c.close();
  clients.clear();
}

/**
 * The detail of the first `type` event (from now on) for which `pred` is true; rejects after
 * `ms` milliseconds.
 */
export function waitFor(target, type, pred = () => true, ms = 5000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      target.removeEventListener(type, on);
      reject(new Error(`no ${type} event as expected within ${ms} ms`));
    }, ms);
    function on(e) {
      let ok;
      try {
        ok = pred(e.detail);
      } catch (err) {
        ok = false;
        reject(err);
      }
      if (!ok) return;
      clearTimeout(timer);
      target.removeEventListener(type, on);
      resolve(e.detail);
    }
    target.addEventListener(type, on);
  });
}

/** Records the details of every `type` event from now on. */
export function record(target, type) {
  const seen = [];
  target.addEventListener(type, (e) => seen.push(e.detail));
  return seen;
}

/** Connects and waits for `ready`. */
export async function connected(client, ms = 5000) {
  const ready = waitFor(client, 'ready', () => true, ms);
  client.connect();
  return ready;
}

/** The first detail in `seen` (a record()) matching `pred`, or the next such event. */
export function seenOrWait(seen, target, type, pred = () => true, ms = 5000) {
  const found = seen.find(pred);
  return found ? Promise.resolve(found) : waitFor(target, type, pred, ms);
}

/**
 * A WebSocket class around `ws` that the tests can steer: every instance is kept in
 * `TapSocket.sockets`, its sent frames in `sent`; `dropPongs` (copied from the class at
 * construction) hides what confirms a message from the client (`pong`, and the journal's
 * `received`), and kill() cuts the TCP connection (no close handshake), as a phone losing its
 * network does.
 */
export class TapSocket {
  static sockets = [];
  static dropPongs = false;

  constructor(url) {
    this.inner = new WS(url);
    this.sent = [];
    this.dropPongs = TapSocket.dropPongs;
    this.onopen = this.onmessage = this.onclose = this.onerror = null;
    TapSocket.sockets.push(this);
    this.inner.onopen = (e) => this.onopen && this.onopen(e);
    this.inner.onmessage = (e) => {
      if (typeof e.data === 'string') validate('server', JSON.parse(e.data));
      if (this.dropPongs && typeof e.data === 'string' && ['pong', 'received'].includes(JSON.parse(e.data).t)) return;
      if (this.onmessage) this.onmessage(e);
    };
    this.inner.onclose = (e) => this.onclose && this.onclose(e);
    this.inner.onerror = (e) => this.onerror && this.onerror(e);
  }

  static reset() {
    TapSocket.sockets = [];
    TapSocket.dropPongs = false;
  }

  static get last() {
    return TapSocket.sockets.at(-1);
  }

  get readyState() {
    return this.inner.readyState;
  }
  get bufferedAmount() {
    return this.inner.bufferedAmount;
  }
  get binaryType() {
    return this.inner.binaryType;
  }
  set binaryType(v) {
    this.inner.binaryType = v;
  }
  send(data) {
    const frame = JSON.parse(data);
    validate('client', frame);
    this.sent.push(frame);
    this.inner.send(data);
  }
  close(code, reason) {
    this.inner.close(code, reason);
  }
  kill() {
    this.inner.terminate();
  }
}

/** A WebSocket the test plays the gateway on: sent frames in `sent`, recv() delivers one. */
export class ScriptedSocket {
  static sockets = [];
  constructor() {
    this.sent = [];
    this.readyState = 0;
    this.bufferedAmount = 0;
    this.binaryType = 'blob';
    this.onopen = this.onmessage = this.onclose = this.onerror = null;
    ScriptedSocket.sockets.push(this);
    setTimeout(() => {
      this.readyState = 1;
      if (this.onopen) this.onopen({});
    }, 0);
  }
  static get last() {
    return ScriptedSocket.sockets.at(-1);
  }
  send(data) {
    const f = JSON.parse(data);
    checkFrame('client', f);
    this.sent.push(f);
  }
  recv(frame) {
    checkFrame('server', frame);
    if (this.onmessage) this.onmessage({ data: JSON.stringify(frame) });
  }
  close() {
    this.readyState = 3;
  }
  cut() {
    this.readyState = 3;
    if (this.onclose) this.onclose({ code: 1006, reason: '' });
  }
  sentOf(t) {
    return this.sent.filter((f) => f.t === t);
  }
}

const tick = () => new Promise((r) => setTimeout(r, 5));
/** Waits until a socket after the first `count` has sent its first frame (the hello); returns it. */
export async function nextHello(count) {
  for (let i = 0; i < 400 && !(ScriptedSocket.sockets.length > count && ScriptedSocket.last.sent.length); i++) await tick();
  return ScriptedSocket.last;
}
