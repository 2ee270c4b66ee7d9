// AudioWorklet: plays the reply's voice — pcm16 mono chunks (``response.output_audio.delta``)
// pushed by the main thread — and counts the samples it has played of each output item.
//
// The AudioContext runs at the audio's own rate (24 kHz), so a sample here is a sample of the
// server's audio: the played count is exactly where the listener is in the item, which is what
// ``conversation.item.truncate``'s ``audio_end_ms`` must say. Messages in: {type: "push", itemId,
// pcm: ArrayBuffer}, {type: "stop", token}. Out: {type: "progress", …} a few times a second while
// playing and once when the queue runs dry, {type: "stopped", token, …} right after a stop.

const PROGRESS_EVERY = 1200; // samples between progress reports (50 ms at 24 kHz)

class Pcm16Player extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = []; // [{itemId, samples: Float32Array, at}] at: the next sample to play
    this.itemId = null; // the item now playing (or last played)
    this.played = new Map(); // item id → samples played
    this.received = new Map(); // item id → samples received
    this.chunks = 0; // chunks received, all items
    this.sinceReport = 0;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  onMessage(m) {
    if (!m) return;
    if (m.type === "push") {
      const pcm = new Int16Array(m.pcm);
      const samples = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
      this.queue.push({ itemId: m.itemId, samples, at: 0 });
      this.received.set(m.itemId, (this.received.get(m.itemId) || 0) + pcm.length);
      this.chunks++;
    } else if (m.type === "stop") {
      // what was queued is dropped unplayed; the report says where each item stopped
      const cut = this.queue.length > 0 ? this.queue[0].itemId : this.itemId;
      this.queue = [];
      this.port.postMessage({ type: "stopped", token: m.token, ...this.report(cut) });
    }
  }

  report(itemId) {
    return {
      itemId,
      played: itemId ? this.played.get(itemId) || 0 : 0,
      received: itemId ? this.received.get(itemId) || 0 : 0,
      chunks: this.chunks,
      queued: this.queue.reduce((n, c) => n + c.samples.length - c.at, 0),
      playing: this.queue.length > 0,
    };
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    const wasPlaying = this.queue.length > 0;
    let i = 0;
    while (i < out.length && this.queue.length > 0) {
      const c = this.queue[0];
      const n = Math.min(out.length - i, c.samples.length - c.at);
      out.set(c.samples.subarray(c.at, c.at + n), i);
      c.at += n;
      i += n;
      this.itemId = c.itemId;
      this.played.set(c.itemId, (this.played.get(c.itemId) || 0) + n);
      this.sinceReport += n;
      if (c.at === c.samples.length) this.queue.shift();
    }
    out.fill(0, i); // silence after the queue ran dry
    for (let ch = 1; ch < outputs[0].length; ch++) outputs[0][ch].set(out);
    if (wasPlaying && (this.sinceReport >= PROGRESS_EVERY || this.queue.length === 0)) {
      this.sinceReport = 0;
      this.port.postMessage({ type: "progress", ...this.report(this.itemId) });
    }
    return true;
  }
}

registerProcessor("pcm16-player", Pcm16Player);
