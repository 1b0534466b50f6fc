#!/usr/bin/env node
// `tsc --noEmit --strict` over the typings and the example app: once with Node's types and no
// DOM (tsconfig.json), once as a browser project (test/types/tsconfig.dom.json).
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { packageDir, tscPath, typeRoots } from './cache.mjs';

const tsc = tscPath();
const types = typeRoots();
if (!tsc || !types) {
  console.error('typescript or @types/node is missing: run `npm run setup` in sdk/typescript');
  process.exit(1);
}
let failed = false;
for (const [project, extra] of [
  ['tsconfig.json', ['--typeRoots', types]],
  [join('test', 'types', 'tsconfig.dom.json'), []],
]) {
  const r = spawnSync(process.execPath, [tsc, '-p', project, '--noEmit', '--strict', ...extra], { cwd: packageDir, stdio: 'inherit' });
  console.log(`tsc --noEmit --strict -p ${project}: ${r.status === 0 ? 'ok' : 'FAILED'}`);
  if (r.status !== 0) failed = true;
}
process.exit(failed ? 1 : 0);
