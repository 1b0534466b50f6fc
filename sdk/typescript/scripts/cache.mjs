// Where the dev tools (typescript, ws, @types/*) live: a cache outside the repository, so the
// package needs no node_modules of its own. HERMES_SDK_TS_CACHE overrides the place.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const packageDir = fileURLToPath(new URL('..', import.meta.url));
export const cacheDir = process.env.HERMES_SDK_TS_CACHE || join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'hermes-mobile', 'sdk-ts');
export const cacheModules = join(cacheDir, 'node_modules');

/** The pinned devDependencies of package.json. */
export function devDependencies() {
  return JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')).devDependencies;
}

/** The installed version of a dev tool in the cache, or null. */
export function cachedVersion(name) {
  try {
    return JSON.parse(readFileSync(join(cacheModules, name, 'package.json'), 'utf8')).version;
  } catch {
    return null;
  }
}

/** True when every pinned devDependency is in the cache at its version. */
export function cacheReady() {
  return Object.entries(devDependencies()).every(([name, version]) => cachedVersion(name) === version);
}

/** require() of a dev tool: from this package's own node_modules if any, else the cache. */
export function requireDev(name) {
  for (const base of [join(packageDir, 'package.json'), join(cacheDir, 'package.json')]) {
    try {
      return createRequire(base)(name);
    } catch {
      /* next */
    }
  }
  throw new Error(`${name} is not installed: run \`npm run setup\` in sdk/typescript (installs the dev tools into ${cacheDir})`);
}

/** The path of tsc, or null. */
export function tscPath() {
  for (const dir of [join(packageDir, 'node_modules'), cacheModules]) {
    const p = join(dir, 'typescript', 'bin', 'tsc');
    if (existsSync(p)) return p;
  }
  return null;
}

/** The @types folder tsc should use, or null. */
export function typeRoots() {
  for (const dir of [join(packageDir, 'node_modules'), cacheModules]) {
    if (existsSync(join(dir, '@types', 'node'))) return join(dir, '@types');
  }
  return null;
}
