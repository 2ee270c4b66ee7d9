// web/markdown.js: what a reply's Markdown turns into, and that nothing in it can run code.

import { renderMarkdown, safeHref } from "../markdown.js";
import { assert, equal, test } from "./harness.js";

/** The rendered DOM as an HTML string (text nodes come out escaped, as the browser holds them). */
function html(src) {
  const box = document.createElement("div");
  box.append(renderMarkdown(src));
  return box.innerHTML;
}

function dom(src) {
  const box = document.createElement("div");
  box.append(renderMarkdown(src));
  return box;
}

const LINK = 'rel="noopener noreferrer nofollow" target="_blank"';

// ---------------------------------------------------------------------------- safety

test("a script tag is text, not an element", () => {
  const src = "<script>alert(1)</script>";
  equal(html(src), "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>");
  assert(dom(src).querySelector("script") === null, "a <script> element was created");
});

test("an img with onerror is text, not an element", () => {
  const src = '<img src=x onerror="alert(1)">';
  const box = dom(src);
  assert(box.querySelector("img") === null, "an <img> element was created");
  equal(box.textContent, src);
});

test("javascript:, data: and relative link targets keep only their label", () => {
  equal(html("[click](javascript:alert(1))"), "<p>click</p>");
  equal(html("[click](JaVaScRiPt:alert(1))"), "<p>click</p>");
  equal(html("[click](data:text/html;base64,PHNjcmlwdD4=)"), "<p>click</p>");
  equal(html("[click](/relative/path)"), "<p>click</p>");
  equal(html("[click](//evil.example/x)"), "<p>click</p>");
});

test("a quote in a link target cannot add an attribute", () => {
  const a = dom('[x](https://e.example/"onmouseover="alert(1))').querySelector("a");
  assert(a !== null, "no link rendered");
  equal(
    a.getAttributeNames().sort(),
    ["href", "rel", "target"],
    "attributes on the link",
  );
  assert(a.href.startsWith("https://e.example/"), `href ${a.href}`);
});

test("a code fence's language cannot inject markup or attributes", () => {
  const src = '```"><img src=x onerror=alert(1)>\nx\n```';
  equal(html(src), "<pre><code>x</code></pre>");
});

test("a bare javascript: URL is not linked", () => {
  equal(html("go javascript:alert(1) now"), "<p>go javascript:alert(1) now</p>");
});

test("hostile input yields only the allowed elements and attributes", () => {
  const corpus = [
    "<iframe src=https://e.example></iframe>",
    "[a](javascript:x) [b](vbscript:x) [c](https://ok.example)",
    "**<b onclick=x>bold</b>** _<svg onload=alert(1)>_",
    "```html\n<script>alert(1)</script>\n```",
    "> <a href=javascript:x>q</a>\n- <style>*{}</style>\n1. <object data=x>",
    "`<code onclick=x>` ~~<del>~~ https://e.example/<script>",
    "[![img](javascript:x)](https://e.example)",
    "# <h1 onclick=x>\n---\n\\<b\\>",
  ];
  const blocks = ["P", "BR", "H3", "H4", "H5", "H6", "PRE", "CODE", "UL", "OL", "LI", "BLOCKQUOTE", "HR"];
  const tags = new Set([...blocks, "STRONG", "EM", "DEL", "A"]);
  const attrs = new Set(["href", "rel", "target", "class", "data-lang", "start"]);
  for (const src of corpus) {
    for (const node of dom(src).querySelectorAll("*")) {
      assert(tags.has(node.nodeName), `${JSON.stringify(src)} made a <${node.nodeName}>`);
      for (const name of node.getAttributeNames()) {
        assert(attrs.has(name), `${JSON.stringify(src)} made a ${name}= attribute on <${node.nodeName}>`);
      }
      if (node.nodeName === "A") {
        const scheme = new URL(node.href).protocol;
        assert(scheme === "https:" || scheme === "http:", `${JSON.stringify(src)} linked ${node.href}`);
      }
    }
  }
});

test("safeHref accepts absolute http(s) URLs only", () => {
  equal(safeHref("https://e.example"), "https://e.example/");
  equal(safeHref("  http://e.example/x?y=1  "), "http://e.example/x?y=1");
  equal(safeHref("HTTPS://E.EXAMPLE/A"), "https://e.example/A");
  equal(safeHref("javascript:alert(1)"), null);
  equal(safeHref("ftp://e.example/"), null);
  equal(safeHref("//e.example/"), null);
  equal(safeHref("/path"), null);
  equal(safeHref("http://"), null);
});

// ---------------------------------------------------------------------------- links

test("a Markdown link opens in a new tab without a referrer", () => {
  equal(
    html("[the docs](https://e.example/a?b=1&c=2)"),
    `<p><a href="https://e.example/a?b=1&amp;c=2" ${LINK}>the docs</a></p>`,
  );
});

test("a link label may hold inline formatting", () => {
  equal(
    html("[**bold** label](https://e.example/)"),
    `<p><a href="https://e.example/" ${LINK}><strong>bold</strong> label</a></p>`,
  );
});

test("a bare URL is linked without its trailing punctuation", () => {
  equal(
    html("see https://e.example/a_b."),
    `<p>see <a href="https://e.example/a_b" ${LINK}>https://e.example/a_b</a>.</p>`,
  );
  equal(html("(https://e.example/x)"), `<p>(<a href="https://e.example/x" ${LINK}>https://e.example/x</a>)</p>`);
});

// ---------------------------------------------------------------------------- code

test("a fenced code block keeps its text verbatim with a language class", () => {
  equal(
    html("```python\nprint('<b>hi</b>')\n  indented\n```"),
    '<pre data-lang="python"><code class="language-python">print(\'&lt;b&gt;hi&lt;/b&gt;\')\n  indented</code></pre>',
  );
});

test("Markdown inside a code block is not rendered", () => {
  equal(
    html("```\n**not bold** [x](https://e.example)\n```"),
    "<pre><code>**not bold** [x](https://e.example)</code></pre>",
  );
});

test("an unclosed fence runs to the end (a reply still streaming)", () => {
  equal(
    html("```js\nlet a = 1;\nlet b"),
    '<pre data-lang="js"><code class="language-js">let a = 1;\nlet b</code></pre>',
  );
});

test("a fence closes only on the same character, at least as long", () => {
  equal(html("~~~\n```\nstill code\n~~~"), "<pre><code>```\nstill code</code></pre>");
  equal(html("````\n```\n````\nafter"), "<pre><code>```</code></pre><p>after</p>");
});

test("inline code is verbatim and may contain backticks", () => {
  equal(html("use `a <b> *c*` here"), "<p>use <code>a &lt;b&gt; *c*</code> here</p>");
  equal(html("``a ` b``"), "<p><code>a ` b</code></p>");
  equal(html("an `unclosed tick"), "<p>an `unclosed tick</p>");
});

// ---------------------------------------------------------------------------- blocks

test("paragraphs split on blank lines; single newlines are line breaks", () => {
  equal(html("a\nb\n\nc"), "<p>a<br>b</p><p>c</p>");
  equal(html("a\r\nb\rc"), "<p>a<br>b<br>c</p>");
});

test("headings start at h3 and stop at h6", () => {
  equal(html("# Title"), "<h3>Title</h3>");
  equal(html("## Closing ##"), "<h4>Closing</h4>");
  equal(html("#### Deep"), "<h6>Deep</h6>");
  equal(html("###### Deepest"), "<h6>Deepest</h6>");
  equal(html("#not a heading"), "<p>#not a heading</p>");
});

test("block quotes and thematic breaks", () => {
  equal(html("> quoted\n> more"), "<blockquote><p>quoted<br>more</p></blockquote>");
  equal(html("a\n\n---\n\nb"), "<p>a</p><hr><p>b</p>");
  equal(html("a\n* * *"), "<p>a</p><hr>");
});

test("a bullet list, nested by indentation", () => {
  equal(
    html("- one\n- two\n  - nested\n- three"),
    "<ul><li>one</li><li>two<ul><li>nested</li></ul></li><li>three</li></ul>",
  );
});

test("an ordered list keeps its start number", () => {
  equal(html("1. a\n2. b"), "<ol><li>a</li><li>b</li></ol>");
  equal(html("3. a\n4. b"), '<ol start="3"><li>a</li><li>b</li></ol>');
});

test("blank lines between items make a loose list with paragraphs", () => {
  equal(html("- a\n\n- b"), "<ul><li><p>a</p></li><li><p>b</p></li></ul>");
});

test("a change of bullet starts a new list; a plain line continues the item", () => {
  equal(html("- a\n* b"), "<ul><li>a</li></ul><ul><li>b</li></ul>");
  equal(html("- a\nb"), "<ul><li>a<br>b</li></ul>");
});

test("a code block inside a list item (a tight list: the item's text is not wrapped in <p>)", () => {
  equal(
    html("- run:\n\n  ```sh\n  ls\n  ```"),
    '<ul><li>run:<pre data-lang="sh"><code class="language-sh">ls</code></pre></li></ul>',
  );
});

// ---------------------------------------------------------------------------- inline

test("bold, italic, strike", () => {
  equal(
    html("**bold** *it* _it_ ~~del~~ __also bold__"),
    "<p><strong>bold</strong> <em>it</em> <em>it</em> <del>del</del> <strong>also bold</strong></p>",
  );
});

test("underscores inside words and spaced stars stay text", () => {
  equal(html("a snake_case_name here"), "<p>a snake_case_name here</p>");
  equal(html("2 * 3 * 4"), "<p>2 * 3 * 4</p>");
});

test("backslash escapes punctuation", () => {
  equal(html("\\*not italic\\* \\[not](a link)"), "<p>*not italic* [not](a link)</p>");
});

// ---------------------------------------------------------------------------- robustness

test("empty, null and undefined render nothing", () => {
  equal(html(""), "");
  equal(html(null), "");
  equal(html(undefined), "");
  assert(renderMarkdown("x") instanceof DocumentFragment, "not a DocumentFragment");
});

test("nesting past the depth limit comes out as text, not a stack overflow", () => {
  const box = dom(">".repeat(200) + " deep");
  assert(box.querySelectorAll("blockquote").length <= 14, `${box.querySelectorAll("blockquote").length} quotes`);
  assert(box.textContent.includes("deep"), "the text was lost");
  const list = dom(Array.from({ length: 100 }, (_, i) => " ".repeat(2 * i) + "- x").join("\n"));
  assert(list.querySelectorAll("ul").length <= 14, `${list.querySelectorAll("ul").length} lists`);
});

test("every prefix of a reply renders (as while streaming)", () => {
  const doc =
    "# Plan\n\nSome **bold and `code`** text, a [link](https://e.example/x_(y)).\n\n" +
    "1. first\n2. second\n   - nested *item*\n\n> a quote\n\n```py\nprint('x')\n```\n~~done~~\n";
  for (let n = 0; n <= doc.length; n++) {
    const box = dom(doc.slice(0, n));
    assert(box.querySelector("script,img,iframe") === null, `prefix ${n}`);
  }
  // h3, strong, code (inline), a, ol, ul, blockquote, pre, code (block), del
  const found = dom(doc).querySelectorAll("h3,strong,code,a,ol,ul,blockquote,pre,del");
  equal(found.length, 10, "elements in the whole reply");
});
