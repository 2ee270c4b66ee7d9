// The WebRTC transport: the same Realtime session as protocol.js's WebSocket client, reached the
// way a browser reaches OpenAI — an SDP offer to POST /v1/realtime/calls, Opus both ways, the
// events as JSON on the "oai-events" data channel (docs/WEBRTC.md).
//
// RtcClient is a RealtimeClient whose "socket" is the data channel: seq de-duplication, resume
// bookkeeping and the session/state events are the WebSocket client's own. A drop is resumed by a
// new offer with ?resume_token=…&last_seq=N. When a call cannot be set up — refused, or no
// connection within ``connectMs`` (UDP blocked, ICE failed) — it hangs up and emits "fallback"
// (detail: {reason}); the page then goes on over the WebSocket, resuming the session if it had one.
//
// The microphone is a track of the peer connection (so Chromium's echo canceller sees the reply
// playing), and the reply's voice arrives as the remote track, played by an <audio> element.

import { RealtimeClient } from "./protocol.js";

export const RTC_CONNECT_MS = 8000; // a call whose events channel is not open by then falls back
export const MIC_CONSTRAINTS = { audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true } };

function authHeaders(apiKey) {
  return apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
}

/**
 * Does the server take WebRTC calls (GET /v1/realtime/calls)? {ok: true, iceServers} or
 * {ok: false, status, reason}. A browser without RTCPeerConnection never asks.
 */
export async function probeWebRtc(apiKey, fetchFn = globalThis.fetch) {
  if (typeof RTCPeerConnection === "undefined") return { ok: false, status: 0, reason: "no RTCPeerConnection" };
  try {
    const r = await fetchFn("/v1/realtime/calls", { headers: { accept: "application/json", ...authHeaders(apiKey) } });
    if (!r.ok) return { ok: false, status: r.status, reason: `GET /v1/realtime/calls: ${r.status}` };
    const body = await r.json();
    if (!body || body.webrtc !== true) return { ok: false, status: r.status, reason: "the server offers no calls" };
    return { ok: true, iceServers: Array.isArray(body.ice_servers) ? body.ice_servers : [] };
  } catch (err) {
    return { ok: false, status: 0, reason: String(err && err.message ? err.message : err) };
  }
}

export class RtcClient extends RealtimeClient {
  constructor({ callsUrl = "/v1/realtime/calls", model = null, apiKey = null, iceServers = [], connectMs = RTC_CONNECT_MS }) {
    super({ url: callsUrl, model, apiKey });
    this.transport = "webrtc";
    this.iceServers = iceServers;
    this.connectMs = connectMs;
    this.pc = null;
    this.sender = null;
    this.callId = null;
    this.outTrack = null; // what the audio sender carries: the microphone, silence, or nothing yet
    this.micStream = null;
    this.silence = null; // {ctx, track}: sent while the mic is off, so the call's audio never stops
    this.audio = null; // <audio> playing the server's track
    this.speakerOn = false;
    this._gen = 0; // the current attempt; callbacks of older ones are ignored
    this._attemptOpened = false;
    this._connectTimer = null;
  }

  get isOpen() {
    return this.state === "open" && this.ws !== null && this.ws.readyState === "open";
  }

  sendAudio() {
    return false; // the microphone is a media track here
  }

  close() {
    const callId = this.callId;
    super.close();
    this._teardown();
    this._hangup(callId);
  }

  /** Play (or mute) the server's voice. */
  setSpeaker(on) {
    this.speakerOn = on;
    if (this.audio) this.audio.muted = !on;
  }

  /** Send the microphone on the call (Chromium's echo cancellation, noise suppression and AGC on). */
  async micOn() {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new Error("this browser cannot capture audio here (a secure origin — https or localhost — is needed)");
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia(MIC_CONSTRAINTS);
    } catch (err) {
      const name = err && err.name;
      if (name === "NotAllowedError") throw new Error("microphone permission was denied");
      if (name === "NotFoundError") throw new Error("no microphone was found");
      throw new Error("the microphone could not be opened" + (err && err.message ? `: ${err.message}` : ""));
    }
    this.micStream = stream;
    await this._sendTrack(stream.getAudioTracks()[0]);
  }

  /** Stop the microphone. The call goes on sending silence: a caller whose audio stops is taken for gone. */
  async micOff() {
    const stream = this.micStream;
    this.micStream = null;
    await this._sendTrack(this._silence());
    if (stream) stream.getTracks().forEach((t) => t.stop());
  }

  // ------------------------------------------------------------------ internals

  _silence() {
    if (!this.silence) {
      const ctx = new AudioContext();
      this.silence = { ctx, track: ctx.createMediaStreamDestination().stream.getAudioTracks()[0] };
    }
    return this.silence.track;
  }

  async _sendTrack(track) {
    this.outTrack = track;
    if (this.sender) await this.sender.replaceTrack(track);
  }

  _opened() {
    clearTimeout(this._connectTimer);
    this._attemptOpened = true;
    super._opened();
  }

  _open(tryResume) {
    clearTimeout(this._timer);
    const resuming = tryResume && this._canResume();
    if (!resuming) this.lastSeq = -1;
    this._setState(resuming ? "resuming" : this.everOpened ? "reconnecting" : "connecting", { attempt: this.attempt });
    const gen = ++this._gen;
    this._attemptOpened = false;
    clearTimeout(this._connectTimer);
    this._connectTimer = setTimeout(() => {
      if (gen === this._gen && !this._attemptOpened) {
        this._fail(`no connection within ${this.connectMs} ms (UDP blocked, or ICE failed)`);
      }
    }, this.connectMs);
    this._call(gen, resuming).catch((err) => {
      if (gen === this._gen) this._fail(String(err && err.message ? err.message : err));
    });
  }

  async _call(gen, resuming) {
    this._teardown();
    const pc = new RTCPeerConnection({ iceServers: this.iceServers });
    this.pc = pc;
    const tx = pc.addTransceiver("audio", { direction: "sendrecv" });
    this.sender = tx.sender;
    if (this.outTrack) await tx.sender.replaceTrack(this.outTrack);
    pc.ontrack = (e) => this._play(e.streams[0] || new MediaStream([e.track]));
    const ch = pc.createDataChannel("oai-events");
    ch.binaryType = "arraybuffer";
    await pc.setLocalDescription(await pc.createOffer());
    const q = new URLSearchParams();
    if (resuming) {
      q.set("resume_token", this.resume.token);
      q.set("last_seq", String(this.lastSeq));
    }
    const qs = q.toString();
    const r = await fetch(this.url + (qs ? "?" + qs : ""), {
      method: "POST",
      body: pc.localDescription.sdp,
      headers: { "Content-Type": "application/sdp", ...authHeaders(this.apiKey) },
    });
    const callId = (r.headers.get("Location") || "").split("/").pop() || null;
    if (gen !== this._gen) {
      if (r.status === 201) this._hangup(callId); // given up on while the answer was on its way
      return;
    }
    if (r.status !== 201) {
      let err = {};
      try {
        err = (await r.json()).error || {};
      } catch {
        err = {};
      }
      if (gen !== this._gen) return;
      if (resuming && err.code === "resume_failed") {
        this.resume = null;
        this._emit("session", { kind: "resume-failed", message: err.message || "" });
        this._open(false);
        return;
      }
      if (r.status === 401 || r.status === 403) {
        clearTimeout(this._connectTimer);
        this._gen++;
        this._teardown();
        this._setState("refused", { code: r.status, reason: err.message || "refused by the server" });
        return;
      }
      throw new Error(`the call was refused (${r.status}${err.message ? `: ${err.message}` : ""})`);
    }
    this.callId = callId;
    const answer = await r.text();
    if (gen !== this._gen) return;
    await pc.setRemoteDescription({ type: "answer", sdp: answer });
    this.ws = ch;
    ch.onmessage = (m) => this._onMessage(ch, m);
    const ended = (why) => {
      if (gen !== this._gen) return;
      if (this._attemptOpened) this._onClose(ch, { code: 1006, reason: why });
      else this._fail(why);
    };
    ch.onclose = () => ended("the call ended");
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === "failed") ended("the connection failed (ICE)");
    };
  }

  _onClose(ch, e) {
    if (ch !== this.ws) return;
    this._teardown(); // a new offer makes a new peer connection
    this.ws = ch; // the base class checks it is the current one
    super._onClose(ch, e);
  }

  _fail(reason) {
    clearTimeout(this._connectTimer);
    this._gen++; // late callbacks of this attempt are ignored
    const callId = this.callId;
    this._teardown();
    this._hangup(callId);
    this._emit("fallback", { reason });
  }

  _teardown() {
    const { pc, ws } = this;
    if (ws) ws.onmessage = ws.onclose = null;
    this.ws = null;
    this.sender = null;
    this.pc = null;
    if (pc) {
      pc.ontrack = pc.onconnectionstatechange = null;
      pc.close();
    }
  }

  _hangup(callId) {
    if (!callId) return;
    if (this.callId === callId) this.callId = null;
    fetch(`${this.url}/${encodeURIComponent(callId)}/hangup`, { method: "POST", headers: authHeaders(this.apiKey) }).catch(
      () => {},
    );
  }

  _play(stream) {
    if (!this.audio) {
      this.audio = new Audio();
      this.audio.autoplay = true;
    }
    this.audio.srcObject = stream;
    this.audio.muted = !this.speakerOn;
    this.audio.play().catch(() => {}); // without a gesture yet: it starts with the speaker button
  }
}

/** The microphone of a WebRTC call, shaped like mic.js's Microphone for the mic button. */
export class CallMicrophone {
  constructor(client) {
    this.client = client;
    this.on = false;
  }

  get active() {
    return this.on;
  }

  async start() {
    await this.client.micOn();
    this.on = true;
  }

  async stop() {
    this.on = false;
    await this.client.micOff();
  }
}
