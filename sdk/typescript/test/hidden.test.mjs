// Hidden characters (issue 23, Trojan Source): what a person approves is what runs. Pure
// helpers, no gateway: the class (Cf, Zl, Zp, and Cc but TAB and LF), the markers, and cards.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hasHiddenChars, revealHiddenChars, splitHiddenChars, validateCard } from 'hermes-mobile-client';

const HIDDEN = {
  '\u202E': 'RIGHT-TO-LEFT OVERRIDE', '\u202A': 'LEFT-TO-RIGHT EMBEDDING', '\u2066': 'LEFT-TO-RIGHT ISOLATE',
  '\u2069': 'POP DIRECTIONAL ISOLATE', '\u200E': 'LEFT-TO-RIGHT MARK', '\u061C': 'ARABIC LETTER MARK',
  '\u200B': 'ZERO WIDTH SPACE', '\u200D': 'ZERO WIDTH JOINER (flagged on purpose)', '\uFEFF': 'BYTE ORDER MARK',
  '\u00AD': 'SOFT HYPHEN', '\u2028': 'LINE SEPARATOR (Zl)', '\u2029': 'PARAGRAPH SEPARATOR (Zp)',
  '\u0000': 'NUL', '\r': 'CARRIAGE RETURN', '\u001B': 'ESCAPE', '\u000B': 'VERTICAL TAB', '\u007F': 'DELETE',
  '\u0085': 'NEXT LINE (C1)', '\u{E0001}': 'LANGUAGE TAG (astral Cf)',
};

test('every character of the class is hidden, TAB and LF are not', () => {
  for (const [c, name] of Object.entries(HIDDEN)) {
    assert.equal(hasHiddenChars(`ls ${c}x`), true, name);
  }
  for (const s of ['rm -rf /tmp/x', 'tab\there', 'two\nlines', 'שלום עולם', 'naïve café', '👍🏽', '']) {
    assert.equal(hasHiddenChars(s), false, JSON.stringify(s));
  }
  assert.equal(hasHiddenChars(null), false);
  assert.equal(hasHiddenChars(undefined), false);
});

test('revealHiddenChars shows each one as ⟨U+XXXX⟩ and leaves the rest alone', () => {
  assert.equal(revealHiddenChars('rm -rf /home/user/\u202e tmp.log \u202c'), 'rm -rf /home/user/⟨U+202E⟩ tmp.log ⟨U+202C⟩');
  assert.equal(revealHiddenChars('\u0000\u0009\u000A\u000D'), '⟨U+0000⟩\t\n⟨U+000D⟩'); // 4 digits at least
  assert.equal(revealHiddenChars('a\u{E0001}b'), 'a⟨U+E0001⟩b'); // one code point, not two halves
  assert.equal(revealHiddenChars('\u200b\u200b'), '⟨U+200B⟩⟨U+200B⟩');
  assert.equal(revealHiddenChars('plain text'), 'plain text');
  assert.equal(revealHiddenChars(''), '');
  // A revealed text has nothing hidden left: revealing twice changes nothing.
  const once = revealHiddenChars('x\u2066y\u2069');
  assert.equal(hasHiddenChars(once), false);
  assert.equal(revealHiddenChars(once), once);
});

test('splitHiddenChars: text at even indices, markers at odd ones', () => {
  assert.deepEqual(splitHiddenChars('a\u202eb'), ['a', '⟨U+202E⟩', 'b']);
  assert.deepEqual(splitHiddenChars('\u202e'), ['', '⟨U+202E⟩', '']);
  assert.deepEqual(splitHiddenChars('plain'), ['plain']);
  const s = 'echo \u200dhi\u2028there\u{E007F}';
  assert.equal(splitHiddenChars(s).join(''), revealHiddenChars(s));
});

const frame = (extra = {}) => ({
  t: 'prompt', id: 'p-1', kind: 'exec_approval', text: 'Run this command?', command: 'ls', description: '',
  session: 'mobile:x', timeout_seconds: 60,
  options: [{ id: 'once', label: 'Once', style: 'primary' }, { id: 'deny', label: 'Deny', style: 'danger' }],
  ...extra,
});

test('validateCard: hiddenChars from the gateway, or from its own check; nothing is altered', () => {
  assert.equal(validateCard(frame()).hiddenChars, false);
  assert.equal(validateCard(frame({ hidden_chars: true })).hiddenChars, true); // the gateway says so
  assert.equal(validateCard(frame({ hidden_chars: 'yes' })).hiddenChars, false); // only a real true
  const command = 'rm -rf /home/user/\u202e tmp.log \u202c';
  const card = validateCard(frame({ command }));
  assert.equal(card.hiddenChars, true); // an older gateway sends no flag
  assert.equal(card.command, command, 'the card keeps the exact command; revealing is for display');
  assert.deepEqual(card.options.map((o) => o.id), ['once', 'deny']);
  assert.equal(validateCard(frame({ text: 'Run\u2066 this?' })).hiddenChars, true);
  assert.equal(validateCard(frame({ description: 'safe\u200b' })).hiddenChars, true);
  const clarify = validateCard(frame({ kind: 'clarify', command: undefined, options: [{ id: 'c0', label: 'yes\u202e', style: '' }] }));
  assert.equal(clarify.hiddenChars, true);
  assert.equal(clarify.options[0].id, 'c0');
  // An option the kind does not have is dropped first: its label cannot flag the card.
  assert.equal(validateCard(frame({ options: [{ id: 'once', label: 'Once', style: '' }, { id: 'evil', label: '\u202e', style: '' }] })).hiddenChars, false);
});
