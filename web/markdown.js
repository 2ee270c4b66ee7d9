// A small, safe Markdown renderer: source text in, DOM nodes out.
//
// It never parses HTML and never assigns innerHTML: every piece of text becomes a Text node,
// and the only attributes it sets are a link's href (http/https only, checked with URL), rel
// and target, and a code block's language class (from [A-Za-z0-9_+#.-] only). Whatever the
// model or the user writes — <script>, <img onerror>, javascript: links — comes out as text.
//
// Blocks: paragraphs (single newlines are line breaks), ATX headings, fenced code blocks
// (an unclosed fence — usual while streaming — runs to the end), bullet and ordered lists
// (nested by indentation), block quotes and thematic breaks. Inline: `code`, **bold**,
// *italic* / _italic_, ~~strike~~, [links](https://…), bare http(s) URLs, backslash escapes.

const MAX_DEPTH = 12; // deeper nesting is rendered as plain text

const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const LIST_ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+(.*))?$/;
const BLANK = /^[ \t]*$/;
const LANG = /^[A-Za-z0-9_+#.-]{1,32}$/;

/** Render Markdown ``src`` into a new DocumentFragment. */
export function renderMarkdown(src) {
  const frag = document.createDocumentFragment();
  const lines = String(src ?? "").replace(/\r\n?/g, "\n").split("\n");
  renderBlocks(lines, frag, 0);
  return frag;
}

function el(tag, cls) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  return node;
}

function text(s) {
  return document.createTextNode(s);
}

function listInfo(line) {
  const m = LIST_ITEM.exec(line);
  if (!m) return null;
  const ordered = /\d/.test(m[2][0]);
  return {
    ordered,
    marker: ordered ? m[2].slice(-1) : m[2],
    start: ordered ? parseInt(m[2], 10) : 1,
    indent: m[1].length + m[2].length + (m[3] ? Math.min(4, m[3].length - (m[4] ?? "").length) : 1),
    first: m[4] ?? "",
  };
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || listInfo(line) !== null;
}

function dedent(line, n) {
  let i = 0;
  while (i < n && i < line.length && line[i] === " ") i++;
  return line.slice(i);
}

function renderBlocks(lines, parent, depth) {
  if (depth > MAX_DEPTH) {
    const p = el("p");
    p.append(text(lines.join("\n")));
    parent.append(p);
    return;
  }
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      i++;
      continue;
    }
    let m;
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length) {
        const close = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(lines[i]);
        if (close && close[1][0] === fence[0] && close[1].length >= fence.length) {
          i++;
          break;
        }
        body.push(lines[i]);
        i++;
      }
      const pre = el("pre");
      const code = el("code");
      if (LANG.test(m[2])) {
        code.className = "language-" + m[2];
        pre.dataset.lang = m[2];
      }
      code.append(text(body.join("\n")));
      pre.append(code);
      parent.append(pre);
      continue;
    }
    if ((m = HEADING.exec(line))) {
      const h = el("h" + Math.min(6, m[1].length + 2));
      renderInline(m[2] ?? "", h, depth + 1);
      parent.append(h);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      parent.append(el("hr"));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && !BLANK.test(lines[i])) {
        const q = QUOTE.exec(lines[i]);
        if (!q && (body.length === 0 || startsBlock(lines[i]))) break;
        body.push(q ? q[1] : lines[i]);
        i++;
      }
      const bq = el("blockquote");
      renderBlocks(body, bq, depth + 1);
      parent.append(bq);
      continue;
    }
    const first = listInfo(line);
    if (first) {
      i = renderList(lines, i, first, parent, depth);
      continue;
    }
    // paragraph: until a blank line or the start of another block
    const body = [line.trim()];
    i++;
    while (i < lines.length && !BLANK.test(lines[i]) && !startsBlock(lines[i])) {
      body.push(lines[i].trim());
      i++;
    }
    const p = el("p");
    body.forEach((ln, k) => {
      if (k > 0) p.append(el("br"));
      renderInline(ln, p, depth + 1);
    });
    parent.append(p);
  }
}

function renderList(lines, i, first, parent, depth) {
  const list = el(first.ordered ? "ol" : "ul");
  if (first.ordered && first.start !== 1) list.start = first.start;
  const same = (info) => info && info.ordered === first.ordered && info.marker === first.marker;
  const indentOf = (ln) => ln.length - ln.trimStart().length;
  let loose = false;
  const items = [];
  while (i < lines.length) {
    const info = listInfo(lines[i]);
    if (!same(info)) break;
    const body = [info.first];
    i++;
    while (i < lines.length) {
      const ln = lines[i];
      if (BLANK.test(ln)) {
        let k = i;
        while (k < lines.length && BLANK.test(lines[k])) k++;
        if (k < lines.length && indentOf(lines[k]) >= info.indent) {
          for (; i < k; i++) body.push("");
          continue;
        }
        break; // the blank lines end this item
      }
      const indent = indentOf(ln);
      if (indent >= info.indent || (indent >= 2 && listInfo(ln))) {
        body.push(dedent(ln, info.indent));
        i++;
        continue;
      }
      if (!startsBlock(ln)) {
        body.push(ln.trim()); // lazy continuation of the item's paragraph
        i++;
        continue;
      }
      break;
    }
    items.push(body);
    let k = i;
    while (k < lines.length && BLANK.test(lines[k])) k++;
    if (k > i) {
      if (k < lines.length && same(listInfo(lines[k]))) {
        loose = true;
        i = k;
      } else break;
    }
  }
  for (const body of items) {
    const li = el("li");
    renderBlocks(body, li, depth + 1);
    if (!loose && li.firstChild && li.firstChild.nodeName === "P") {
      const p = li.firstChild; // tight list: no paragraph around the item's text
      p.replaceWith(...p.childNodes);
    }
    list.append(li);
  }
  parent.append(list);
  return i;
}

// ---------------------------------------------------------------------------- inline

const PUNCT = /[!-/:-@[-`{-~]/;
const URL_RE = /^https?:\/\/[^\s<>"'`]+/i;

/** The URL when ``raw`` is an absolute http(s) URL, else null. */
export function safeHref(raw) {
  const s = String(raw).trim();
  if (!/^https?:\/\//i.test(s)) return null;
  try {
    const u = new URL(s);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : null;
  } catch {
    return null;
  }
}

function link(href, label, depth) {
  const a = el("a");
  a.href = href;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  if (typeof label === "string") renderInline(label, a, depth + 1);
  else a.append(label);
  return a;
}

function findClose(s, from, delim) {
  // the next ``delim`` after ``from`` that closes emphasis (not preceded by whitespace)
  let j = from;
  while ((j = s.indexOf(delim, j)) !== -1) {
    if (j > from && !/\s/.test(s[j - 1]) && s[j - 1] !== "\\") {
      if (delim.length === 1 && s[j + 1] === delim) {
        j += 2; // part of a ** run: not ours
        continue;
      }
      if (delim === "_" && /[A-Za-z0-9]/.test(s[j + 1] ?? "")) {
        j++;
        continue;
      }
      return j;
    }
    j++;
  }
  return -1;
}

function renderInline(s, parent, depth) {
  if (depth > MAX_DEPTH) {
    parent.append(text(s));
    return;
  }
  let buf = "";
  const flush = () => {
    if (buf) parent.append(text(buf));
    buf = "";
  };
  let i = 0;
  while (i < s.length) {
    const c = s[i];
    if (c === "\\" && i + 1 < s.length && PUNCT.test(s[i + 1])) {
      buf += s[i + 1];
      i += 2;
      continue;
    }
    if (c === "`") {
      let n = 1;
      while (s[i + n] === "`") n++;
      const ticks = "`".repeat(n);
      let j = s.indexOf(ticks, i + n);
      while (j !== -1 && s[j + n] === "`") j = s.indexOf(ticks, j + n + 1);
      if (j !== -1) {
        flush();
        let body = s.slice(i + n, j);
        if (body.length > 2 && body[0] === " " && body.at(-1) === " ") body = body.slice(1, -1);
        const code = el("code");
        code.append(text(body));
        parent.append(code);
        i = j + n;
        continue;
      }
      buf += ticks;
      i += n;
      continue;
    }
    if (c === "[") {
      const m = /^\[([^\][]*(?:\[[^\][]*\][^\][]*)*)\]\(\s*<?([^\s()<>]*(?:\([^\s()<>]*\)[^\s()<>]*)*)>?(?:\s+"[^"]*")?\s*\)/.exec(
        s.slice(i),
      );
      if (m) {
        const href = safeHref(m[2]);
        flush();
        if (href) parent.append(link(href, m[1], depth));
        else renderInline(m[1], parent, depth + 1); // unsafe or relative target: its label only
        i += m[0].length;
        continue;
      }
    }
    if ((c === "h" || c === "H") && (i === 0 || /[\s(]/.test(s[i - 1]))) {
      const m = URL_RE.exec(s.slice(i));
      if (m) {
        let url = m[0];
        while (/[.,;:!?)\]*_~]$/.test(url)) url = url.slice(0, -1);
        const href = safeHref(url);
        if (href) {
          flush();
          parent.append(link(href, text(url), depth));
          i += url.length;
          continue;
        }
      }
    }
    if ((c === "*" || c === "_" || c === "~") && s[i + 1] === c && s[i + 2] && !/\s/.test(s[i + 2])) {
      const delim = c + c;
      const leftOk = c !== "_" || i === 0 || !/[A-Za-z0-9]/.test(s[i - 1]);
      const j = leftOk ? s.indexOf(delim, i + 2) : -1;
      if (j > i + 2 && !/\s/.test(s[j - 1])) {
        flush();
        const node = el(c === "~" ? "del" : "strong");
        renderInline(s.slice(i + 2, j), node, depth + 1);
        parent.append(node);
        i = j + 2;
        continue;
      }
    }
    if ((c === "*" || c === "_") && s[i + 1] && !/\s/.test(s[i + 1]) && s[i + 1] !== c) {
      const leftOk = c !== "_" || i === 0 || !/[A-Za-z0-9]/.test(s[i - 1]);
      const j = leftOk ? findClose(s, i + 1, c) : -1;
      if (j !== -1) {
        flush();
        const em = el("em");
        renderInline(s.slice(i + 1, j), em, depth + 1);
        parent.append(em);
        i = j + 1;
        continue;
      }
    }
    buf += c;
    i++;
  }
  flush();
}
