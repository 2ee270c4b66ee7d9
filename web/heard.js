// What the listener heard of a spoken reply: played samples → milliseconds, and greying the shown
// text past the heard part. No state, no I/O: unit-tested in web/tests/heard.test.js.
//
// The heard part is the server's own: after ``conversation.item.truncate`` the client retrieves the
// item, whose transcript the server has cut to the words whose audio was played (PROTOCOL.md §19).
// The reply is shown as rendered Markdown, so the heard transcript (source text) is mapped to a
// count of rendered characters by rendering it alone; the text past that count is wrapped in
// ``<span class="unheard">``.

import { renderMarkdown } from "./markdown.js";

/** Samples played at ``rate`` → whole milliseconds (never rounded up past what was played). */
export function playedMs(samples, rate) {
  if (!(samples > 0) || !(rate > 0)) return 0;
  return Math.floor((samples * 1000) / rate);
}

/** How many characters of ``renderMarkdown(full)`` the source prefix ``heard`` accounts for. */
export function renderedLength(heard, full) {
  if (!heard) return 0;
  const shown = renderMarkdown(full).textContent;
  const n = renderMarkdown(heard).textContent.replace(/\s+$/, "").length;
  return Math.min(n, shown.length);
}

/**
 * Wrap every character of ``root``'s text after the first ``keep`` in ``<span class="unheard">``.
 * Returns the number of characters wrapped (0: the whole text was heard).
 */
export function greyPast(root, keep) {
  const doc = root.ownerDocument;
  const walker = doc.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) nodes.push(n);
  let seen = 0;
  let wrapped = 0;
  for (const node of nodes) {
    const len = node.data.length;
    if (seen + len <= keep) {
      seen += len;
      continue;
    }
    const cut = Math.max(0, keep - seen);
    const tail = cut > 0 ? node.splitText(cut) : node;
    seen += len;
    if (tail.data.length === 0) continue;
    const span = doc.createElement("span");
    span.className = "unheard";
    tail.replaceWith(span);
    span.append(tail);
    wrapped += tail.data.length;
  }
  return wrapped;
}
