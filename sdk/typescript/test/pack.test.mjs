// `npm pack` makes a tarball that installs into a fresh project with no other package; there
// `import { HermesClient } from 'hermes-mobile-client'` works, a strict TypeScript app using it
// and `ws` type-checks, and the example app, compiled against it, chats with the gateway.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cacheModules, packageDir, tscPath } from '../scripts/cache.mjs';
import { startGateway } from './helpers.mjs';

const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
let work;
let project;
let gw;

function run(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

before(async () => {
  work = mkdtempSync(join(tmpdir(), 'hermes-sdk-pack-'));
  project = join(work, 'app');
  mkdirSync(project);
  gw = await startGateway();
});
after(async () => {
  rmSync(work, { recursive: true, force: true });
  await gw.stop();
});

test('npm pack, then npm install of the tarball into a fresh project', () => {
  const packed = JSON.parse(run(npm, ['pack', '--json', '--pack-destination', work], packageDir));
  const files = packed[0].files.map((f) => f.path).sort();
  assert.deepEqual(files, ['README.md', 'frames.d.ts', 'index.d.ts', 'index.js', 'package.json', 'protocol.js']);
  const tarball = join(work, packed[0].filename);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'fresh-app', version: '1.0.0', private: true, type: 'module' }));
  // --offline: the package has no dependency to fetch.
  run(npm, ['install', '--offline', '--no-audit', '--no-fund', tarball], project);
  const installed = readdirSync(join(project, 'node_modules')).filter((n) => !n.startsWith('.'));
  assert.deepEqual(installed, ['hermes-mobile-client'], 'nothing else installed: no runtime dependencies');
  writeFileSync(
    join(project, 'smoke.mjs'),
    [
      "import { HermesClient, HermesError, MAX_TEXT_CHARS } from 'hermes-mobile-client';",
      "import * as viaPath from 'hermes-mobile-client/protocol.js';",
      "const c = new HermesClient({ token: 't', url: 'ws://127.0.0.1:1/ws', WebSocket: class {}, lifecycle: false });",
      "console.log(JSON.stringify({ state: c.state, max: MAX_TEXT_CHARS, same: viaPath.HermesClient === HermesClient, error: new HermesError('x', 'y').code }));",
    ].join('\n'),
  );
  assert.deepEqual(JSON.parse(run(process.execPath, ['smoke.mjs'], project)), { state: 'idle', max: 12000, same: true, error: 'x' });
});

test('a strict TypeScript app on the installed package, with ws injected, type-checks', (t) => {
  const tsc = tscPath();
  if (!tsc) return t.skip('typescript is not installed: `npm run setup` in sdk/typescript');
  // The dev tools from the cache stand in for `npm install ws @types/ws @types/node`.
  symlinkSync(join(cacheModules, 'ws'), join(project, 'node_modules', 'ws'), 'dir');
  symlinkSync(join(cacheModules, '@types'), join(project, 'node_modules', '@types'), 'dir');
  mkdirSync(join(project, 'src'));
  writeFileSync(
    join(project, 'src', 'bot.ts'),
    [
      "import { WebSocket } from 'ws';",
      "import { HermesClient, type MessageDetail, type ServerFrameMap } from 'hermes-mobile-client';",
      "import type { ClientText } from 'hermes-mobile-client/frames';",
      "const client = new HermesClient({ url: 'ws://127.0.0.1:8787/ws', token: 'x'.repeat(16), WebSocket, lifecycle: false });",
      "client.addEventListener('message', (e) => { const d: MessageDetail = e.detail; console.log(d.text); });",
      "const frame: ClientText = { t: 'text', id: 'm-1', text: 'hi' };",
      "const t: ServerFrameMap['ready']['t'] = 'ready';",
      'export { frame, t };',
    ].join('\n'),
  );
  cpSync(join(packageDir, 'examples', 'chat.ts'), join(project, 'src', 'chat.ts'));
  writeFileSync(
    join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2022'], types: ['node'], strict: true, outDir: 'build', skipLibCheck: false },
      include: ['src'],
    }),
  );
  run(process.execPath, [tsc, '-p', '.'], project);
});

test('the example app, compiled against the tarball, chats and answers a card', async (t) => {
  if (!tscPath()) return t.skip('typescript is not installed: `npm run setup` in sdk/typescript');
  // Node 22+ uses its global WebSocket; older Node the `ws` linked above.
  const child = spawn(process.execPath, ['build/chat.js', '--url', gw.url, '--token', gw.token, '--device', 'sdk-ts-example'], {
    cwd: project,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const exited = new Promise((r) => child.once('exit', r));
  const waitOut = (re) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${re} in the example's output within 5 s:\n${out}\n${err}`)), 5000);
      const check = () => {
        if (re.test(out)) {
          clearTimeout(timer);
          child.stdout.off('data', on);
          resolve();
        }
      };
      const on = (d) => {
        out += d;
        check();
      };
      child.stdout.on('data', on);
      check();
    });
  try {
    await waitOut(/\[online as mobile:sdk-ts-example\]/);
    child.stdin.write('hello from the example\n');
    await waitOut(/hermes: echo: hello from the example\n/);
    child.stdin.write('/stream one two three\n');
    await waitOut(/hermes: one two three\n/);
    child.stdin.write('/approve ls\n');
    await waitOut(/\[card\][^\n]*\n {2}\$ ls\n {2}1\) once\n/i);
    child.stdin.write('1\n');
    await waitOut(/\[card answered: once\]/i);
    await waitOut(/hermes: approved \(once\): ls\n/);
    child.stdin.write('/quit\n');
    const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), 5000).unref())]);
    assert.equal(code, 0, `the example exited ${code}:\n${out}\n${err}`);
  } finally {
    if (child.exitCode === null) child.kill();
  }
});
