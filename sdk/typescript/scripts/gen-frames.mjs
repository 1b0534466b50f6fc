#!/usr/bin/env node
// Generates frames.d.ts, the TypeScript types of every Protocol v1 frame, from the JSON Schema
// docs/protocol-v1.schema.json (draft 2020-12).
//
//   node scripts/gen-frames.mjs                 write frames.d.ts from docs/protocol-v1.schema.json
//   node scripts/gen-frames.mjs --check         exit 1 when frames.d.ts is not what it would write
//   node scripts/gen-frames.mjs --schema S --out O
//
// What it understands: type (string, integer, number, boolean, null, object, array, or a list
// of them), const, enum, $ref to #/$defs/X (and # itself), properties/required,
// additionalProperties, items/prefixItems, oneOf/anyOf (a union), allOf (an intersection),
// and description (a /** */ comment, with the limits as tags). Anything else is `unknown`.
// The root's oneOf becomes `Frame`; each $def becomes an interface (an object) or a type alias;
// the defs of each direction's union (ClientFrame, ServerFrame) also become maps by `t`.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { relative, resolve } from 'node:path';

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const LIMIT_TAGS = [
  'minLength', 'maxLength', 'pattern', 'format', 'minimum', 'maximum', 'exclusiveMinimum',
  'exclusiveMaximum', 'multipleOf', 'minItems', 'maxItems', 'uniqueItems', 'minProperties',
  'maxProperties', 'default', 'deprecated',
];

/** A def name as a TypeScript identifier. */
export function typeName(name) {
  const s = String(name).replace(/[^A-Za-z0-9_$]/g, '_');
  return /^[0-9]/.test(s) ? '_' + s : s;
}

const literal = (v) => (v === null ? 'null' : JSON.stringify(v));
const propKey = (k) => (IDENT.test(k) ? k : JSON.stringify(k));

function docLines(s) {
  if (!s || typeof s !== 'object') return [];
  const lines = [];
  if (typeof s.title === 'string' && s.title && s.title !== s.description) lines.push(...s.title.split('\n'));
  if (typeof s.description === 'string' && s.description) lines.push(...s.description.split('\n'));
  for (const tag of LIMIT_TAGS) {
    if (s[tag] === undefined) continue;
    lines.push(`@${tag} ${typeof s[tag] === 'string' && tag !== 'default' ? s[tag] : JSON.stringify(s[tag])}`);
  }
  return lines.map((l) => l.replace(/\*\//g, '*\\/').trimEnd());
}

function comment(s, indent) {
  const lines = docLines(s);
  if (!lines.length) return '';
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((l) => (l ? `${indent} * ${l}` : `${indent} *`)).join('\n')}\n${indent} */\n`;
}

export function generate(schema, { source = 'docs/protocol-v1.schema.json' } = {}) {
  const defs = (schema && typeof schema === 'object' && schema.$defs) || {};
  const rootName = Object.prototype.hasOwnProperty.call(defs, 'Frame') ? 'AnyFrame' : 'Frame';

  function refName(ref) {
    if (ref === '#') return rootName;
    const m = /^#\/\$defs\/(.+)$/.exec(ref);
    if (!m) return 'unknown';
    const name = decodeURIComponent(m[1]).replace(/~1/g, '/').replace(/~0/g, '~');
    if (!Object.prototype.hasOwnProperty.call(defs, name)) throw new Error(`$ref to a missing def: ${ref}`);
    return typeName(name);
  }

  // Parenthesizes a type that has a | or & outside any brackets or quotes.
  function paren(t) {
    let depth = 0;
    let quote = '';
    for (let i = 0; i < t.length; i++) {
      const c = t[i];
      if (quote) {
        if (c === '\\') i++;
        else if (c === quote) quote = '';
      } else if (c === '"' || c === "'") quote = c;
      else if ('{[(<'.includes(c)) depth++;
      else if ('}])>'.includes(c)) depth--;
      else if (depth === 0 && (c === '|' || c === '&')) return `(${t})`;
    }
    return t;
  }

  function union(types) {
    const uniq = [...new Set(types)];
    if (uniq.includes('unknown')) return 'unknown';
    const some = uniq.filter((t) => t !== 'never');
    return some.length ? some.join(' | ') : 'never';
  }

  function objectType(s, indent) {
    const props = s.properties && typeof s.properties === 'object' ? s.properties : {};
    const required = new Set(Array.isArray(s.required) ? s.required : []);
    const keys = Object.keys(props);
    const ap = s.additionalProperties;
    let index = null;
    if (ap === true) index = 'unknown';
    else if (ap && typeof ap === 'object') index = keys.length ? 'unknown' : typeOf(ap, indent + '  ');
    if (!keys.length && !required.size) {
      if (index) return `{ [key: string]: ${index} }`;
      return ap === false ? 'Record<string, never>' : 'Record<string, unknown>';
    }
    const inner = indent + '  ';
    let body = '';
    for (const k of keys) {
      body += comment(props[k], inner);
      body += `${inner}${propKey(k)}${required.has(k) ? '' : '?'}: ${typeOf(props[k], inner)};\n`;
    }
    for (const k of required) {
      if (!keys.includes(k)) body += `${inner}${propKey(k)}: unknown;\n`;
    }
    if (index) body += `${inner}[key: string]: ${index};\n`;
    return `{\n${body}${indent}}`;
  }

  function typeOf(s, indent = '') {
    if (s === true || s === undefined) return 'unknown';
    if (s === false) return 'never';
    if (!s || typeof s !== 'object') return 'unknown';
    if (typeof s.$ref === 'string') return refName(s.$ref);
    if ('const' in s) return literal(s.const);
    if (Array.isArray(s.enum)) return union(s.enum.map(literal));
    const alts = s.oneOf || s.anyOf;
    const own = { ...s };
    delete own.oneOf;
    delete own.anyOf;
    delete own.allOf;
    const hasOwn = own.type !== undefined || own.properties !== undefined || own.items !== undefined || Array.isArray(own.required);
    const parts = [];
    if (hasOwn) parts.push(bareType(own, indent));
    if (Array.isArray(alts)) parts.push(union(alts.map((a) => paren(typeOf(hasOwn ? refine(own, a) : a, indent)))));
    if (Array.isArray(s.allOf)) parts.push(...s.allOf.map((a) => typeOf(a, indent)));
    if (!parts.length) return 'unknown';
    const known = parts.filter((p) => p !== 'unknown');
    if (!known.length) return 'unknown';
    return known.length === 1 ? known[0] : known.map(paren).join(' & ');
  }

  // A oneOf/anyOf branch beside an object's own properties ({required: ["text"]}, say) is a
  // refinement of it: its properties without a type of their own take the object's.
  function refine(base, alt) {
    if (!alt || typeof alt !== 'object' || alt.$ref || !base.properties) return alt;
    const typed = (p) => p && typeof p === 'object' && ['type', '$ref', 'const', 'enum', 'oneOf', 'anyOf', 'allOf', 'properties', 'items'].some((k) => k in p);
    const props = { ...(alt.properties || {}) };
    for (const k of Array.isArray(alt.required) ? alt.required : []) if (!(k in props)) props[k] = {};
    for (const [k, p] of Object.entries(props)) {
      if (!typed(p) && base.properties[k] !== undefined) props[k] = p === true || !p ? base.properties[k] : { ...base.properties[k], ...p };
    }
    return { ...alt, properties: props };
  }

  function bareType(s, indent) {
    const objectish = s.properties || Array.isArray(s.required);
    const types = Array.isArray(s.type) ? s.type : s.type !== undefined ? [s.type] : objectish ? ['object'] : s.items ? ['array'] : [];
    if (!types.length) return 'unknown';
    return union(
      types.map((t) => {
        switch (t) {
          case 'string':
            return 'string';
          case 'integer':
          case 'number':
            return 'number';
          case 'boolean':
            return 'boolean';
          case 'null':
            return 'null';
          case 'object':
            return objectType(s, indent);
          case 'array': {
            if (Array.isArray(s.prefixItems)) {
              const head = s.prefixItems.map((p) => typeOf(p, indent));
              const rest = s.items === false ? '' : `, ...${paren(typeOf(s.items, indent))}[]`;
              return `[${head.join(', ')}${rest}]`;
            }
            const item = typeOf(s.items, indent);
            return `${paren(item)}[]`;
          }
          default:
            return 'unknown';
        }
      }),
    );
  }

  // A union at the top of a type alias: one member a line when long.
  function aliasBody(s) {
    const alts = s.oneOf || s.anyOf;
    const plain = s.type === undefined && s.properties === undefined && s.allOf === undefined;
    if (Array.isArray(alts) && plain) {
      const members = [...new Set(alts.map((a) => paren(typeOf(a, ''))))];
      if (members.length > 3 || members.join(' | ').length > 80) return '\n' + members.map((m) => `  | ${m}`).join('\n');
      return ' ' + union(members);
    }
    return ' ' + typeOf(s, '');
  }

  function isInterface(s) {
    if (!s || typeof s !== 'object' || s.$ref || 'const' in s || s.enum || s.oneOf || s.anyOf || s.allOf) return false;
    const objectish = s.type === 'object' || (s.type === undefined && s.properties);
    const ap = s.additionalProperties;
    const hasProps = s.properties && Object.keys(s.properties).length > 0;
    return !!objectish && !!hasProps && !(ap && typeof ap === 'object' && ap !== true && !hasProps);
  }

  // The defs of one direction, keyed by their frame type `t`.
  function frameMap(prefix) {
    const unionDef = defs[`${prefix}Frame`];
    const alts = unionDef && (unionDef.oneOf || unionDef.anyOf);
    const names = Array.isArray(alts)
      ? alts.map((a) => a && typeof a.$ref === 'string' && /^#\/\$defs\/(.+)$/.exec(a.$ref)).filter(Boolean).map((m) => m[1])
      : Object.keys(defs).filter((n) => n.startsWith(prefix) && n !== `${prefix}Frame`);
    const entries = [];
    for (const name of names) {
      const t = defs[name] && defs[name].properties && defs[name].properties.t;
      const value = t && ('const' in t ? t.const : Array.isArray(t.enum) && t.enum.length === 1 ? t.enum[0] : undefined);
      if (typeof value === 'string') entries.push([value, typeName(name)]);
    }
    return entries;
  }

  let out = '';
  out += `// Generated by scripts/gen-frames.mjs from ${source}: do not edit.\n`;
  out += '// Regenerate with `npm run gen` in sdk/typescript after changing the schema.\n';
  if (typeof schema.$id === 'string') out += `// $id: ${schema.$id}\n`;
  out += '\n';
  out += 'export {};\n';
  if (schema.oneOf || schema.anyOf || schema.$ref || schema.type) {
    out += '\n' + (comment(schema, '') || `/** Any frame of Protocol v1, either direction. */\n`);
    out += `export type ${rootName} =${aliasBody(schema)};\n`;
  }
  for (const [name, def] of Object.entries(defs)) {
    out += '\n' + comment(def, '');
    if (isInterface(def)) out += `export interface ${typeName(name)} ${objectType(def, '')}\n`;
    else out += `export type ${typeName(name)} =${aliasBody(def)};\n`;
  }
  for (const [prefix, who] of [['Client', 'the client sends'], ['Server', 'the gateway sends']]) {
    const entries = frameMap(prefix);
    if (!entries.length) continue;
    out += `\n/** The frames ${who}, by their \`t\`. */\n`;
    out += `export interface ${prefix}FrameMap {\n`;
    for (const [t, type] of entries) out += `  ${propKey(t)}: ${type};\n`;
    out += '}\n';
    out += `\n/** The \`t\` of a frame ${who}. */\n`;
    out += `export type ${prefix}FrameType = keyof ${prefix}FrameMap;\n`;
  }
  return out;
}

function main(argv) {
  const pkg = fileURLToPath(new URL('..', import.meta.url));
  const arg = (flag, dflt) => {
    const i = argv.indexOf(flag);
    return i >= 0 && argv[i + 1] ? resolve(argv[i + 1]) : dflt;
  };
  const schemaPath = arg('--schema', resolve(pkg, '../../docs/protocol-v1.schema.json'));
  const outPath = arg('--out', resolve(pkg, 'frames.d.ts'));
  const repo = resolve(pkg, '../..');
  const rel = relative(repo, schemaPath);
  const source = rel.startsWith('..') ? schemaPath : rel;
  const text = generate(JSON.parse(readFileSync(schemaPath, 'utf8')), { source });
  if (argv.includes('--check')) {
    let have = '';
    try {
      have = readFileSync(outPath, 'utf8');
    } catch {
      /* missing */
    }
    if (have !== text) {
      console.error(`${relative(process.cwd(), outPath)} is not what ${rel} gives: run \`npm run gen\` in sdk/typescript`);
      process.exit(1);
    }
    console.log(`${relative(process.cwd(), outPath)} matches ${source}`);
    return;
  }
  writeFileSync(outPath, text);
  console.log(`wrote ${relative(process.cwd(), outPath)} from ${source}`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
