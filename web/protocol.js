// The Realtime WebSocket client: one session, kept alive across dropped sockets.
//
// Speaks PROTOCOL.md only. Every server event carries ``seq``; the client remembers the last
// one it delivered and drops any it has already seen, so events replayed after a resume are
// applied exactly once. When the socket drops, it reconnects with
// ``?resume_token=…&last_seq=N`` while the token is valid (the server answers
// ``session.resumed`` and replays seq > N); when it cannot resume (no token, expired, or
// ``error {code:"resume_failed"}``) it opens a fresh session and says so.
//
// Events (EventTarget): "event" (detail: a server event, after de-duplication), "state"
// (detail: {state, info}), "session" (detail: {kind: "new"|"resumed"|"resume-failed"|"lost",
// …}).

const RETRY_MS = [0, 300, 700, 1500, 3000, 5000, 8000];
const AUDIO_BACKLOG_BYTES = 1 << 20; // drop microphone frames rather than queue more than this

export const CLOSE_NORMAL = 1000;
export const CLOSE_POLICY = 1008;
export const CLOSE_TOO_BIG = 1009;
export const CLOSE_TRY_AGAIN = 1013;
export const CLOSE_SUPERSEDED = 4009;

export class RealtimeClient extends EventTarget {
  /**
   * @param {{url: string, model?: string|null, apiKey?: string|null}} opts
   *   url: ws(s)://host/v1/realtime (no query).
   */
  constructor({ url, model = null, apiKey = null }) {
    super();
    this.url = url;
    this.transport = "websocket";
    this.model = model;
    this.apiKey = apiKey;
    this.ws = null;
    this.state = "idle"; // idle | connecting | open | reconnecting | resuming | refused | superseded | closed
    this.lastSeq = -1; // highest seq delivered in the current session
    this.duplicates = 0; // events dropped because their seq was already seen
    this.sessionId = null;
    this.resume = null; // {token, expiresInS, expiresAt}
    this.attempt = 0;
    this.everOpened = false;
    this.lost = false; // a socket dropped since the last session.created/resumed
    this._timer = null;
    this._stopped = false;
  }

  connect() {
    this._stopped = false;
    this._open(false);
  }

  /** Close for good (no reconnect). */
  close() {
    this._stopped = true;
    clearTimeout(this._timer);
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(CLOSE_NORMAL);
    this._setState("closed");
  }

  /** Drop the current session and start a fresh one (a new conversation). */
  restart() {
    this.resume = null;
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(CLOSE_NORMAL);
    clearTimeout(this._timer);
    this._open(false);
  }

  /** Take over another client's session (a WebRTC call that failed): resume it here if it can be. */
  adopt(other) {
    this.lastSeq = other.lastSeq;
    this.sessionId = other.sessionId;
    this.resume = other.resume;
    this.everOpened = other.everOpened;
    this.lost = other.lost;
    this._stopped = false;
    this._open(true);
  }

  get isOpen() {
    return this.state === "open" && this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  /** Send one client event (JSON). Returns false when there is no open session to take it. */
  send(event) {
    if (!this.isOpen) return false;
    this.ws.send(JSON.stringify(event));
    return true;
  }

  /** Send raw pcm16 little-endian audio as one binary frame. */
  sendAudio(buffer) {
    if (!this.isOpen || this.ws.bufferedAmount > AUDIO_BACKLOG_BYTES) return false;
    this.ws.send(buffer);
    return true;
  }

  // ------------------------------------------------------------------ internals

  _setState(state, info = {}) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, ...info } }));
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  _canResume() {
    return this.resume !== null && Date.now() < this.resume.expiresAt;
  }

  _open(tryResume) {
    clearTimeout(this._timer);
    const resuming = tryResume && this._canResume();
    const q = new URLSearchParams();
    if (this.model) q.set("model", this.model);
    if (resuming) {
      q.set("resume_token", this.resume.token);
      q.set("last_seq", String(this.lastSeq));
    } else {
      this.lastSeq = -1; // a fresh session numbers its events from 0
    }
    const protocols = this.apiKey ? ["realtime", "openai-insecure-api-key." + this.apiKey] : [];
    this._setState(resuming ? "resuming" : this.everOpened ? "reconnecting" : "connecting", {
      attempt: this.attempt,
    });
    let ws;
    try {
      const qs = q.toString();
      ws = new WebSocket(this.url + (qs ? "?" + qs : ""), protocols);
    } catch (err) {
      this._setState("refused", { reason: String(err && err.message ? err.message : err) });
      return;
    }
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onmessage = (m) => this._onMessage(ws, m);
    ws.onclose = (e) => this._onClose(ws, e);
  }

  _onMessage(ws, m) {
    if (ws !== this.ws || typeof m.data !== "string") return;
    let ev;
    try {
      ev = JSON.parse(m.data);
    } catch {
      return;
    }
    if (!ev || typeof ev.type !== "string") return;
    if (ev.type === "session.created") {
      // always a fresh session (also when a resume was asked for and not granted): numbering restarts
      this.lastSeq = typeof ev.seq === "number" ? ev.seq : -1;
      const r = ev.resume;
      this.sessionId = ev.session && ev.session.id;
      this.resume =
        r && typeof r.token === "string"
          ? { token: r.token, expiresInS: Number(r.expires_in_s) || 0, expiresAt: Infinity }
          : null;
      const wasLost = this.lost;
      this._opened();
      this._emit("session", { kind: "new", afterLoss: wasLost, resumable: this.resume !== null });
      this._emit("event", ev);
      return;
    }
    if (ev.type === "error" && ev.error && ev.error.code === "resume_failed") {
      this.resume = null;
      this._emit("session", { kind: "resume-failed", message: ev.error.message || "" });
      this.ws = null; // abandon this socket; start a fresh session now
      ws.close(CLOSE_NORMAL);
      this._open(false);
      return;
    }
    if (typeof ev.seq === "number") {
      if (ev.seq <= this.lastSeq) {
        this.duplicates++;
        return; // already delivered (replayed after a resume)
      }
      this.lastSeq = ev.seq;
    }
    if (ev.type === "session.resumed") {
      this._opened();
      this._emit("session", { kind: "resumed", replayFrom: ev.replay_from_seq });
    }
    this._emit("event", ev);
  }

  _opened() {
    this.attempt = 0;
    this.everOpened = true;
    this.lost = false;
    this._setState("open", { resumable: this.resume !== null });
  }

  _onClose(ws, e) {
    if (ws !== this.ws) return;
    this.ws = null;
    if (this._stopped) return this._setState("closed");
    if (e.code === CLOSE_POLICY) {
      // auth, origin or model refused: retrying will not help
      return this._setState("refused", { code: e.code, reason: e.reason || "refused by the server" });
    }
    if (e.code === CLOSE_SUPERSEDED) {
      return this._setState("superseded", { reason: e.reason || "this session was resumed elsewhere" });
    }
    if (this.state === "open" && this.resume) {
      this.resume.expiresAt = Date.now() + this.resume.expiresInS * 1000; // the grace period starts now
    }
    if (this.state === "open") {
      this.lost = true;
      this._emit("session", { kind: "lost", code: e.code, reason: e.reason, resumable: this._canResume() });
    }
    const delay = RETRY_MS[Math.min(this.attempt, RETRY_MS.length - 1)];
    this.attempt++;
    this._setState("reconnecting", { code: e.code, reason: e.reason, inMs: delay });
    this._timer = setTimeout(() => this._open(true), delay);
  }
}

/** The ws:// URL of /v1/realtime on the server that served this page. */
export function realtimeUrl(loc = window.location) {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${loc.host}/v1/realtime`;
}
