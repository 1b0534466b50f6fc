// Agent text as Markdown. markdown-it (vendored, see vendor/README.md) parses; this module
// builds the DOM from its tokens with createElement and textContent, so no HTML string is
// ever parsed: with `html: false` raw HTML is a text token, and even a token we do not know
// becomes text. Links are checked twice (markdown-it's validateLink, then http(s)/mailto
// only, and never this page's own #token= fragment) and open in a new tab without an opener
// or referrer. Images are shown as links: the page loads nothing the agent names.
import '/vendor/markdown-it.min.js'; // a UMD build: it sets globalThis.markdownit

const md = globalThis.markdownit({ html: false, linkify: true, typographer: false });

// Elements a token may open. Anything else is rendered as its children only.
const TAGS = new Set(['p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'ul', 'ol', 'li', 'blockquote',
  'strong', 'em', 's', 'table', 'thead', 'tbody', 'tr', 'th', 'td']);
const SAFE_PROTOCOLS = ['http:', 'https:', 'mailto:'];

function safeHref(href) {
  try {
    const u = new URL(href, location.href);
    return SAFE_PROTOCOLS.includes(u.protocol) && !pairsThisPage(u) ? u.href : null;
  } catch {
    return null;
  }
}

// A link to this page with a token in its fragment (`/#token=…`, `#a=1&TOKEN=…`, `#pair=…`)
// would offer to pair this browser with a token the agent chose (issue 23): it is not made
// a link at all. Keys are compared as URLSearchParams decodes them, in any case.
export function pairsThisPage(u) {
  if (u.origin !== location.origin || !u.hash) return false;
  return [...new URLSearchParams(u.hash.slice(1)).keys()].some((k) => /^\s*(token|pair)\s*$/i.test(k));
}

function link(href) {
  const url = href && safeHref(href);
  if (!url) return document.createElement('span'); // the text stays, the link does not
  const a = document.createElement('a');
  a.href = url;
  a.target = '_blank';
  a.rel = 'noopener noreferrer';
  return a;
}

// A table cell's alignment comes as style="text-align:…"; CSP forbids style attributes, and
// a class says the same.
function open(t) {
  if (t.type === 'link_open') return link(t.attrGet('href'));
  if (!TAGS.has(t.tag)) return document.createElement('span');
  const e = document.createElement(t.tag);
  if (t.tag === 'ol' && t.attrGet('start')) e.start = Number(t.attrGet('start'));
  const align = /text-align:(left|right|center)/.exec(t.attrGet('style') || '');
  if (align) e.className = 'align-' + align[1];
  return e;
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // No clipboard API (plain http on a LAN is not a secure context): a selected textarea.
    const ta = document.createElement('textarea');
    ta.value = text;
    ta.setAttribute('readonly', '');
    ta.className = 'copy-scratch';
    document.body.append(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand('copy'); } catch { ok = false; }
    ta.remove();
    return ok;
  }
}

function codeBlock(text, info) {
  const box = document.createElement('div');
  box.className = 'code-block';
  const lang = (info || '').trim().split(/\s+/)[0];
  if (lang) box.dataset.lang = lang.slice(0, 40);
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'copy-button';
  button.textContent = 'Copy';
  button.setAttribute('aria-label', 'Copy code');
  const code = text.replace(/\n$/, '');
  let reset = null;
  button.addEventListener('click', async () => {
    const ok = await copyText(code);
    button.textContent = ok ? 'Copied' : 'Copy failed';
    button.dataset.state = ok ? 'copied' : 'failed';
    clearTimeout(reset);
    reset = setTimeout(() => {
      button.textContent = 'Copy';
      delete button.dataset.state;
    }, 1500);
  });
  const pre = document.createElement('pre');
  const c = document.createElement('code');
  c.textContent = code;
  pre.append(c);
  box.append(button, pre);
  return box;
}

// Tokens without a pair: text, breaks, code, rules, images; unknown ones become text.
function leaf(t, parent) {
  switch (t.type) {
    case 'inline': return build(t.children || [], parent);
    case 'text': return parent.append(t.content);
    case 'softbreak': return parent.append('\n');
    case 'hardbreak': return parent.append(document.createElement('br'));
    case 'code_inline': {
      const c = document.createElement('code');
      c.textContent = t.content;
      return parent.append(c);
    }
    case 'fence':
    case 'code_block': return parent.append(codeBlock(t.content, t.info));
    case 'hr': return parent.append(document.createElement('hr'));
    case 'image': {
      const a = link(t.attrGet('src'));
      a.textContent = t.content || t.attrGet('src') || 'image';
      return parent.append(a);
    }
    default: return parent.append(t.content || '');
  }
}

function build(tokens, parent) {
  const stack = [parent];
  for (const t of tokens) {
    const top = stack[stack.length - 1];
    if (t.nesting === 1) {
      // A tight list's paragraphs are hidden: their text goes straight into the <li>.
      const e = t.hidden ? top : open(t);
      if (e !== top) top.append(e);
      stack.push(e);
    } else if (t.nesting === -1) {
      if (stack.length > 1) stack.pop();
    } else {
      leaf(t, top);
    }
  }
}

// Replaces `target`'s children with `text` rendered as Markdown.
export function renderMarkdown(target, text) {
  const frag = document.createDocumentFragment();
  build(md.parse(text, {}), frag);
  target.replaceChildren(frag);
}
