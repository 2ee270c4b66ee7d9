// Spoken replies in the page: the speaker button, playing the voice as it streams, and stopping it
// — on Stop, Esc or barge-in — with a truncate that tells the server what was heard.
//
// Over the WebSocket the voice comes as ``response.output_audio.delta`` (pcm16 24 kHz), played by
// speaker.js's AudioWorklet; a stop sends ``conversation.item.truncate`` with ``audio_end_ms`` from
// the worklet's played-sample count. Over WebRTC it is the call's remote track: a stop sends
// ``output_audio_buffer.clear`` and the server truncates at its own playout position. Either way,
// when the server says ``conversation.item.truncated`` the page retrieves the item and greys the
// reply past the transcript the server kept (heard.js).

import { Speaker } from "./speaker.js";
import { notice, rid, ui } from "./views.js";

export class VoiceOut {
  /**
   * @param {{client: () => any, responseFor: (ev: any) => any, owner: (itemId: string) => any,
   *          changed: () => void}} hooks
   *   client(): the live client; responseFor(ev) / owner(itemId): the ResponseView an event or
   *   item belongs to; changed(): the playing state changed (the Stop button follows it).
   */
  constructor(hooks) {
    this.hooks = hooks;
    this.on = false;
    this.speaker = new Speaker();
    this.spoken = new Map(); // item id → {contentIndex}: items whose audio this page was sent
    this.halted = new Set(); // items stopped: their late deltas (a cancel in flight) are not played
    this.halting = false;
    this.current = null; // the item whose audio was pushed last
    this.asked = new Set(); // event ids of our retrieve/truncate events (their errors are not the user's)
    this.rtcPlaying = null; // WebRTC: the response id whose audio the call is playing
    this.lastStop = null; // the last halt: {reason, itemId, played, received, audioEndMs} (shown in the UI title)
    let wasPlaying = false;
    this.speaker.addEventListener("progress", () => {
      if (this.speaker.playing !== wasPlaying) {
        wasPlaying = this.speaker.playing;
        hooks.changed();
      }
    });
  }

  get playing() {
    const c = this.hooks.client();
    if (c && c.transport === "webrtc") return this.rtcPlaying !== null;
    return this.speaker.playing;
  }

  /** The speaker button (a click: audio may start). */
  async toggle() {
    const c = this.hooks.client();
    if (this.on) {
      await this.halt("speaker-off");
      this.on = false;
      await this.speaker.disable();
      if (c && c.setSpeaker) c.setSpeaker(false);
      this.show();
      this.ask(["text"]);
      return;
    }
    try {
      if (c && c.transport === "webrtc") c.setSpeaker(true);
      else await this.speaker.enable();
      if (c && c.audio) c.audio.play().catch(() => {});
    } catch (err) {
      notice(`The speaker could not start: ${err.message}.`, "error");
      return;
    }
    this.on = true;
    this.show();
    this.ask(["audio"]);
  }

  /** The transport changed (a WebRTC call fell back to the WebSocket): play through the worklet now. */
  async transportChanged() {
    this.rtcPlaying = null;
    const c = this.hooks.client();
    if (!this.on || !c) return;
    if (c.transport === "websocket") await this.speaker.enable().catch(() => {});
    else c.setSpeaker(true);
  }

  show() {
    ui.speaker.setAttribute("aria-pressed", String(this.on));
    ui.speaker.setAttribute("aria-label", this.on ? "Turn the speaker off" : "Turn the speaker on");
  }

  /** Ask the session for spoken (or text) replies. */
  ask(modalities) {
    const c = this.hooks.client();
    if (c) c.send({ type: "session.update", session: { type: "realtime", output_modalities: modalities } });
  }

  /** A new session started: it has the server's default modalities until asked again. */
  sessionStarted() {
    this.spoken.clear();
    this.halted.clear();
    this.rtcPlaying = null;
    if (this.on) this.ask(["audio"]);
  }

  /** Stop the voice now; over the WebSocket, tell the server where it stopped. */
  async halt(reason) {
    const c = this.hooks.client();
    if (!c) return;
    if (c.transport === "webrtc") {
      if (this.rtcPlaying !== null) c.send({ type: "output_audio_buffer.clear" });
      this.lastStop = { reason, itemId: null };
      return;
    }
    // playing now, or between two chunks of a reply still being spoken (the next is on its way)
    const current = this.current;
    const owner = current ? this.hooks.owner(current) : null;
    const speaking = owner && owner.el.dataset.status === "in_progress" && !this.halted.has(current);
    if (!(this.speaker.playing || speaking) || this.halting) return;
    this.halting = true; // deltas that arrive before the worklet answers are dropped too
    let at;
    try {
      at = await this.speaker.stop();
    } finally {
      this.halting = false;
    }
    if (!at || !at.itemId) return;
    this.lastStop = { reason, ...at };
    this.halted.add(at.itemId);
    const spoken = this.spoken.get(at.itemId);
    const eventId = rid("evt_truncate_");
    this.asked.add(eventId);
    c.send({
      type: "conversation.item.truncate",
      event_id: eventId,
      item_id: at.itemId,
      content_index: spoken ? spoken.contentIndex : 0,
      audio_end_ms: at.audioEndMs,
    });
    ui.stop.title = `Stopped after ${at.audioEndMs} ms of this reply's voice`;
    this.hooks.changed();
  }

  /** An error answering one of our own truncate/retrieve events: logged, not shown. */
  ownError(err) {
    if (!err.event_id || !this.asked.has(err.event_id)) return false;
    this.asked.delete(err.event_id);
    console.warn(`stream-omni: ${err.code}: ${err.message}`);
    return true;
  }

  handlers() {
    const text = (ev) => {
      const r = this.hooks.responseFor(ev);
      return r ? r.text(ev.item_id, ev.output_index) : null;
    };
    return {
      "response.output_audio.delta": (ev) => {
        this.spoken.set(ev.item_id, { contentIndex: ev.content_index ?? 0 });
        const c = this.hooks.client();
        if (this.halting || this.halted.has(ev.item_id) || !this.on || !c || c.transport !== "websocket") return;
        this.current = ev.item_id;
        if (this.speaker.push(ev.item_id, ev.delta || "")) {
          this.hooks.changed();
        }
      },
      "response.output_audio_transcript.delta": (ev) => {
        const b = text(ev);
        if (b) b.append(ev.delta || "");
        const r = this.hooks.responseFor(ev);
        if (r) r.waiting.remove();
      },
      "response.output_audio_transcript.done": (ev) => {
        const b = text(ev);
        if (b) b.done(ev.transcript);
      },
      "conversation.item.truncated": (ev) => {
        if (!this.hooks.owner(ev.item_id)) return;
        const eventId = rid("evt_heard_");
        this.asked.add(eventId);
        this.hooks.client().send({ type: "conversation.item.retrieve", event_id: eventId, item_id: ev.item_id });
      },
      "conversation.item.retrieved": (ev) => {
        const item = ev.item || {};
        const r = this.hooks.owner(item.id);
        const part = (item.content || []).find((p) => p && p.type === "output_audio");
        if (!r || !part || typeof part.transcript !== "string") return;
        r.text(item.id).heardUpTo(part.transcript);
      },
      "output_audio_buffer.started": (ev) => {
        this.rtcPlaying = ev.response_id || "";
        this.hooks.changed();
      },
      "output_audio_buffer.stopped": () => {
        this.rtcPlaying = null;
        this.hooks.changed();
      },
      "output_audio_buffer.cleared": () => {
        this.rtcPlaying = null;
        this.hooks.changed();
      },
      "session.updated": (ev) => {
        const m = ev.session && ev.session.output_modalities;
        if (this.on && Array.isArray(m) && !m.includes("audio")) {
          notice("This server answers in text only (it has no voice loaded).", "warn");
          this.toggle();
        }
      },
    };
  }
}
