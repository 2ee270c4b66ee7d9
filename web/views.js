// Stream-Omni browser client: page elements, message views (text, images, figures) and render batching.

import { imageDataUrl } from "./attachments.js";
import { greyPast, renderedLength } from "./heard.js";
import { renderMarkdown } from "./markdown.js";

export const $ = (id) => document.getElementById(id);
export const ui = {
  log: $("log"),
  empty: $("empty"),
  conn: $("conn"),
  connLabel: $("conn-label"),
  model: $("model"),
  form: $("composer"),
  input: $("input"),
  send: $("send"),
  stop: $("stop"),
  attach: $("attach"),
  file: $("file"),
  camera: $("camera"),
  mic: $("mic"),
  speaker: $("speaker"),
  micLabel: $("mic-label"),
  imageMode: $("image-mode"),
  attachments: $("attachments"),
  voice: $("voice"),
  dropzone: $("dropzone"),
  hint: $("hint"),
};

// Words for error codes a person is likely to meet. The server's own message, which names the
// specific problem ("image input is not enabled on this server"), follows them.
export const ERROR_WORDS = {
  server_busy: "The server is busy right now. Please try again in a moment.",
  conversation_already_has_active_response: "A reply is still being written. Wait for it, or press Stop first.",
  context_length_exceeded: "The conversation is now too long for the model. Reload the page to start a new one.",
  audio_disabled: "Voice input is not enabled on this server.",
  unsupported_content: "The server cannot take that kind of input",
  invalid_image: "The server could not read that image",
  image_too_large: "That image is too large for the server",
  rate_limited: "Too many requests. Please wait a moment.",
  transcription_failed: "Your speech could not be transcribed.",
  server_error: "The server hit an internal error handling that.",
  generation_failed: "The model failed while writing the reply.",
};

export function errorWords(code, message) {
  const base = ERROR_WORDS[code];
  const msg = (message || "").trim();
  if (!base) return msg ? msg[0].toUpperCase() + msg.slice(1) : `The server reported an error (${code || "unknown"}).`;
  if (!msg || base.toLowerCase().includes(msg.toLowerCase())) return base;
  return `${base.replace(/\.$/, "")}: ${msg}`;
}

export function rid(prefix) {
  const a = new Uint8Array(8);
  crypto.getRandomValues(a);
  return prefix + Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function h(tag, cls, textContent) {
  const n = document.createElement(tag);
  if (cls) n.className = cls;
  if (textContent !== undefined) n.textContent = textContent;
  return n;
}

// ---------------------------------------------------------------------------- scrolling

let follow = true; // keep the newest message in view unless the person scrolled up
ui.log.addEventListener("scroll", () => {
  follow = ui.log.scrollHeight - ui.log.scrollTop - ui.log.clientHeight < 48;
});

export function append(node) {
  if (ui.empty) ui.empty.hidden = true;
  ui.log.append(node);
  stick();
  return node;
}

export function stick() {
  if (follow) ui.log.scrollTop = ui.log.scrollHeight;
}

export function notice(text, kind = "info") {
  const n = h("div", `notice notice-${kind}`);
  if (kind === "error") n.setAttribute("role", "alert");
  n.append(h("span", "notice-text", text));
  return append(n);
}

// ---------------------------------------------------------------------------- render batching

const dirty = new Set();
let frameQueued = false;

export function markDirty(block) {
  dirty.add(block);
  if (frameQueued) return;
  frameQueued = true;
  const run = () => {
    frameQueued = false;
    for (const b of dirty) b.render();
    dirty.clear();
    stick();
  };
  if (document.hidden) setTimeout(run, 50);
  else requestAnimationFrame(run);
}

// ---------------------------------------------------------------------------- messages

export class TextBlock {
  constructor(itemId, outputIndex) {
    this.itemId = itemId;
    this.outputIndex = outputIndex;
    this.text = "";
    this.el = h("div", "md");
    this.el.dataset.itemId = itemId;
    this.el.rawText = "";
    this.heard = null; // spoken and cut short: the transcript the server kept (what was heard)
  }
  append(delta) {
    this.text += delta;
    this.el.rawText = this.text;
    markDirty(this);
  }
  done(text) {
    if (typeof text === "string" && text !== this.text) {
      // the deltas did not add up to the final text: show the server's text, and say so
      console.warn(`stream-omni: text of ${this.itemId} repaired from output_text.done`);
      this.el.dataset.repaired = "true";
      this.text = text;
      this.el.rawText = text;
      markDirty(this);
    }
  }
  /** The voice stopped: grey the text past ``transcript``, what the listener heard. */
  heardUpTo(transcript) {
    this.heard = transcript;
    this.el.heardText = transcript;
    markDirty(this);
  }
  render() {
    this.el.replaceChildren(renderMarkdown(this.text));
    if (this.heard !== null) {
      const unheard = greyPast(this.el, renderedLength(this.heard, this.text));
      this.el.dataset.unheard = String(unheard);
      this.el.title = unheard ? "Greyed: the part of the reply you did not hear" : "";
    }
  }
}

export class ImageBlock {
  constructor(itemId, outputIndex) {
    this.itemId = itemId;
    this.outputIndex = outputIndex;
    this.el = h("figure", "gen");
    this.el.dataset.itemId = itemId;
    this.frame = h("div", "gen-frame");
    this.img = h("img");
    this.img.alt = "Generated image (preview)";
    this.img.hidden = true;
    this.frame.append(this.img);
    this.caption = h("figcaption", "gen-caption", "Generating an image…");
    this.el.append(this.frame, this.caption);
    this.el.dataset.state = "generating";
  }
  status(words) {
    this.caption.textContent = words;
  }
  preview(b64, index) {
    const url = imageDataUrl(b64);
    if (!url) return;
    this.img.src = url;
    this.img.hidden = false;
    this.img.alt = `Preview of the generated image, step ${index + 1}`;
    this.el.dataset.state = "preview";
    this.el.dataset.previews = String(index + 1);
    this.caption.textContent = `Generating an image… preview ${index + 1}`;
  }
  done(item) {
    const url = item.result ? imageDataUrl(item.result) : null;
    if (!url || (item.status && item.status !== "completed")) {
      this.el.dataset.state = "failed";
      this.caption.textContent = item.status === "cancelled" ? "Image stopped." : "The image could not be made.";
      return;
    }
    this.img.src = url;
    this.img.hidden = false;
    this.img.alt = "Generated image";
    this.el.dataset.state = "done";
    this.caption.textContent = "Generated image · ";
    const a = h("a", "", "save");
    a.href = url;
    a.download = `${this.itemId}.png`;
    this.caption.append(a);
  }
  render() {}
}

export const STATUS_WORDS = {
  in_progress: "",
  completed: "",
  cancelled: "Stopped.",
  incomplete: "Cut short: the reply reached its length limit.",
  failed: "The reply failed.",
  interrupted: "Cut off: the connection was lost and the reply could not be recovered.",
};

export class ResponseView {
  constructor(id) {
    this.id = id;
    this.blocks = new Map(); // item id → TextBlock | ImageBlock
    this.el = h("article", "msg assistant");
    this.el.dataset.responseId = id;
    this.el.dataset.status = "in_progress";
    this.el.setAttribute("aria-busy", "true");
    this.el.setAttribute("aria-label", "Assistant reply");
    this.body = h("div", "body");
    this.waiting = h("div", "typing");
    this.waiting.setAttribute("aria-label", "The assistant is writing");
    this.waiting.append(h("span"), h("span"), h("span"));
    this.body.append(this.waiting);
    this.meta = h("footer", "meta");
    this.statusEl = h("span", "status");
    this.figures = h("span", "figures");
    this.meta.append(this.statusEl, this.figures);
    this.el.append(this.body, this.meta);
    append(this.el);
  }

  _insert(block) {
    if (block instanceof ImageBlock) this.waiting.remove(); // text blocks: on their first text
    this.blocks.set(block.itemId, block);
    const after = [...this.blocks.values()].find((b) => b !== block && b.outputIndex > block.outputIndex);
    if (after) this.body.insertBefore(block.el, after.el);
    else this.body.append(block.el);
    return block;
  }

  text(itemId, outputIndex = 0) {
    const b = this.blocks.get(itemId);
    return b instanceof TextBlock ? b : this._insert(new TextBlock(itemId, outputIndex));
  }

  image(itemId, outputIndex = 0) {
    const b = this.blocks.get(itemId);
    return b instanceof ImageBlock ? b : this._insert(new ImageBlock(itemId, outputIndex));
  }

  get rawText() {
    return [...this.blocks.values()].map((b) => (b instanceof TextBlock ? b.text : "")).join("");
  }

  setStatus(status, words) {
    this.el.dataset.status = status;
    this.statusEl.textContent = words ?? STATUS_WORDS[status] ?? "";
    const ended = status !== "in_progress" && status !== "resuming";
    this.el.setAttribute("aria-busy", ended ? "false" : "true");
    this.el.classList.toggle("ended", ended);
    if (ended) {
      this.waiting.remove();
      if (this.blocks.size === 0 && status !== "completed") this.body.append(h("p", "empty-reply", "(no text)"));
    }
  }

  setFigures(m) {
    if (!m) return;
    const parts = [];
    const titles = [];
    if (typeof m.ttft_ms === "number") {
      parts.push(`first text ${Math.round(m.ttft_ms)} ms`);
      titles.push("time from the request to the first text");
    }
    if (typeof m.tokens_per_s === "number") {
      parts.push(`${m.tokens_per_s >= 100 ? Math.round(m.tokens_per_s) : m.tokens_per_s.toFixed(1)} tok/s`);
      titles.push("decoding speed");
    }
    if (typeof m.draft_acceptance === "number") {
      const pct = m.draft_acceptance <= 1 ? m.draft_acceptance * 100 : m.draft_acceptance;
      parts.push(`drafts ${Math.round(pct)}% accepted`);
      titles.push("share of speculative draft tokens the model accepted");
    }
    if (typeof m.tokens === "number") parts.push(`${m.tokens} tokens`);
    this.figures.textContent = parts.join(" · ");
    this.figures.title = titles.join("; ");
  }
}

export function userMessage({ text = "", images = [], voice = false }) {
  const el = h("article", "msg user" + (voice ? " voice" : ""));
  el.setAttribute("aria-label", voice ? "You said" : "You wrote");
  const body = h("div", "body");
  if (images.length) {
    const thumbs = h("div", "thumbs");
    for (const im of images) {
      const img = h("img");
      img.src = im.dataUrl;
      img.alt = `Image: ${im.name}`;
      thumbs.append(img);
    }
    body.append(thumbs);
  }
  const p = h("p", "text", text); // the person's own words are shown exactly as typed
  body.append(p);
  const meta = h("footer", "meta");
  const status = h("span", "status");
  meta.append(status);
  el.append(body, meta);
  append(el);
  return { el, p, status };
}
