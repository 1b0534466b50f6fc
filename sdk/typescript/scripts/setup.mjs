#!/usr/bin/env node
// Installs the pinned devDependencies (typescript, ws, ajv, @types/node, @types/ws) into the cache
// outside the repository (scripts/cache.mjs), unless they are there already.
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { cacheDir, cacheReady, devDependencies } from './cache.mjs';

if (cacheReady()) {
  console.log(`dev tools are in ${cacheDir}`);
} else {
  mkdirSync(cacheDir, { recursive: true });
  const manifest = join(cacheDir, 'package.json');
  if (!existsSync(manifest)) writeFileSync(manifest, JSON.stringify({ name: 'hermes-mobile-sdk-ts-cache', private: true }, null, 2) + '\n');
  const specs = Object.entries(devDependencies()).map(([name, version]) => `${name}@${version}`);
  console.log(`installing ${specs.join(' ')} into ${cacheDir}`);
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  execFileSync(npm, ['install', '--no-audit', '--no-fund', '--save-exact', ...specs], { cwd: cacheDir, stdio: 'inherit' });
  if (!cacheReady()) {
    console.error('the dev tools are still not at their pinned versions');
    process.exit(1);
  }
}
