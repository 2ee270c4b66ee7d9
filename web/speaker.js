// The speaker: plays the reply's voice as it streams in (pcm16 24 kHz through player-worklet.js)
// and knows, to the sample, how much of each item the listener has heard.
//
// Events (EventTarget): "progress" (detail: the worklet's report {itemId, played, received, chunks,
// queued, playing}) while audio plays and when it runs dry.

import { playedMs } from "./heard.js";

export const SPEAKER_RATE = 24000; // audio/pcm as the server sends it: no resampling in the page
const STOP_REPLY_MS = 500; // a stop is answered by the worklet within a render quantum; this bounds a stall

export function base64ToPcm16(b64) {
  const bin = atob(b64);
  const n = bin.length & ~1; // whole samples only
  const bytes = new Uint8Array(n);
  for (let i = 0; i < n; i++) bytes[i] = bin.charCodeAt(i);
  return bytes.buffer; // little-endian pcm16, as every browser's Int16Array reads it
}

export class Speaker extends EventTarget {
  constructor() {
    super();
    this.ctx = null;
    this.node = null;
    this.pushed = 0; // pushes posted to the worklet
    this.samplesPushed = 0;
    this.report = { itemId: null, played: 0, received: 0, chunks: 0, queued: 0, playing: false };
    this.playedBy = new Map(); // item id → samples played, as last reported
    this._stops = new Map(); // token → resolve
    this._token = 0;
  }

  get on() {
    return this.node !== null;
  }

  /** True while audio is queued or playing (pushes the worklet has not reported on count as playing). */
  get playing() {
    return this.on && (this.report.playing || this.pushed > this.report.chunks);
  }

  /** Start the audio output (call from a click: browsers start audio only after a gesture). */
  async enable() {
    if (this.ctx) return;
    if (typeof AudioWorkletNode === "undefined") throw new Error("this browser has no AudioWorklet");
    const ctx = new AudioContext({ sampleRate: SPEAKER_RATE, latencyHint: "interactive" });
    try {
      await ctx.audioWorklet.addModule(new URL("./player-worklet.js", import.meta.url));
      const node = new AudioWorkletNode(ctx, "pcm16-player", {
        numberOfInputs: 0,
        numberOfOutputs: 1,
        outputChannelCount: [1],
      });
      node.port.onmessage = (e) => this._onMessage(e.data);
      node.connect(ctx.destination);
      if (ctx.state === "suspended") await ctx.resume();
      this.ctx = ctx;
      this.node = node;
      this.pushed = 0;
      this.report = { ...this.report, chunks: 0, playing: false };
    } catch (err) {
      await ctx.close().catch(() => {});
      throw new Error("audio output failed to start" + (err && err.message ? `: ${err.message}` : ""));
    }
  }

  async disable() {
    const { ctx, node } = this;
    this.ctx = this.node = null;
    if (node) {
      node.port.onmessage = null;
      node.disconnect();
    }
    for (const resolve of this._stops.values()) resolve(null);
    this._stops.clear();
    if (ctx) await ctx.close().catch(() => {});
  }

  /** Queue one ``response.output_audio.delta`` (base64 pcm16) of ``itemId``. */
  push(itemId, b64) {
    if (!this.node) return false;
    const pcm = base64ToPcm16(b64);
    this.pushed++;
    this.samplesPushed += pcm.byteLength / 2;
    this.node.port.postMessage({ type: "push", itemId, pcm }, [pcm]);
    return true;
  }

  /**
   * Stop now: queued audio is dropped. Resolves to where playback stopped,
   * {itemId, played, received, audioEndMs}, or null when the speaker is off.
   */
  stop() {
    if (!this.node) return Promise.resolve(null);
    const token = ++this._token;
    return new Promise((resolve) => {
      const done = (r) => {
        clearTimeout(timer);
        this._stops.delete(token);
        resolve(r ? { ...r, audioEndMs: playedMs(r.played, SPEAKER_RATE) } : null);
      };
      const timer = setTimeout(() => done(this.report), STOP_REPLY_MS);
      this._stops.set(token, done);
      this.node.port.postMessage({ type: "stop", token });
    });
  }

  _onMessage(m) {
    if (!m) return;
    if (m.itemId) this.playedBy.set(m.itemId, m.played);
    if (m.type === "stopped") {
      this.report = { ...m, playing: false };
      const done = this._stops.get(m.token);
      if (done) done(m);
      this.dispatchEvent(new CustomEvent("progress", { detail: this.report }));
    } else if (m.type === "progress") {
      this.report = m;
      this.dispatchEvent(new CustomEvent("progress", { detail: m }));
    }
  }
}
