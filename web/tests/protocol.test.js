// web/protocol.js: the Realtime client's seq de-duplication, resume bookkeeping, reconnect
// back-off and close-code handling, against a fake WebSocket and a fake clock.

import {
  CLOSE_NORMAL,
  CLOSE_POLICY,
  CLOSE_SUPERSEDED,
  CLOSE_TOO_BIG,
  CLOSE_TRY_AGAIN,
  RealtimeClient,
  realtimeUrl,
} from "../protocol.js";
import { assert, equal, test } from "./harness.js";

const URL_ = "ws://gw.example/v1/realtime";

/** Timers and Date.now under the test's control: advance(ms) runs what falls due, in order. */
class FakeClock {
  constructor() {
    this.now = 1_000_000;
    this.timers = [];
    this.nextId = 1;
  }
  setTimeout(fn, ms = 0) {
    const id = this.nextId++;
    this.timers.push({ id, at: this.now + Math.max(0, ms), fn });
    return id;
  }
  clearTimeout(id) {
    this.timers = this.timers.filter((t) => t.id !== id);
  }
  advance(ms) {
    const end = this.now + ms;
    for (;;) {
      const due = this.timers.filter((t) => t.at <= end).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (!due) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.now = due.at;
      due.fn();
    }
    this.now = end;
  }
}

/** Stands in for the browser's WebSocket; the test plays the server through it. */
class FakeSocket {
  static CONNECTING = 0;
  static OPEN = 1;
  static CLOSING = 2;
  static CLOSED = 3;
  static made = [];

  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.readyState = FakeSocket.OPEN;
    this.bufferedAmount = 0;
    this.sent = [];
    this.closedWith = null;
    this.onmessage = null;
    this.onclose = null;
    FakeSocket.made.push(this);
  }
  send(data) {
    this.sent.push(data);
  }
  close(code, reason = "") {
    // as a browser does: the close event comes later, from the task queue
    this.closedWith = { code, reason };
    this.readyState = FakeSocket.CLOSED;
    queueMicrotask(() => this.onclose && this.onclose({ code, reason }));
  }
  // --- the server's side
  receive(ev) {
    this.onmessage({ data: typeof ev === "string" || ev instanceof ArrayBuffer ? ev : JSON.stringify(ev) });
  }
  drop(code = 1006, reason = "") {
    this.readyState = FakeSocket.CLOSED;
    this.onclose({ code, reason });
  }
  get query() {
    return new URL(this.url).searchParams;
  }
}

/** Run ``fn`` with the fake socket and clock in place of the browser's; put them back after. */
async function withFakes(fn) {
  const saved = {
    WebSocket: globalThis.WebSocket,
    setTimeout: globalThis.setTimeout,
    clearTimeout: globalThis.clearTimeout,
  };
  const savedNow = Date.now;
  const clock = new FakeClock();
  FakeSocket.made = [];
  globalThis.WebSocket = FakeSocket;
  globalThis.setTimeout = (f, ms) => clock.setTimeout(f, ms);
  globalThis.clearTimeout = (id) => clock.clearTimeout(id);
  Date.now = () => clock.now;
  try {
    await fn({ clock, sockets: FakeSocket.made });
  } finally {
    Object.assign(globalThis, saved);
    Date.now = savedNow;
  }
}

/** A client with everything it emits recorded. */
function client(opts = {}) {
  const c = new RealtimeClient({ url: URL_, model: "m", ...opts });
  const log = { events: [], states: [], sessions: [] };
  c.addEventListener("event", (e) => log.events.push(e.detail));
  c.addEventListener("state", (e) => log.states.push(e.detail));
  c.addEventListener("session", (e) => log.sessions.push(e.detail));
  return { c, log };
}

const created = (seq = 0, token = "tok", expires = 30) => ({
  type: "session.created",
  seq,
  session: { id: "sess_1" },
  resume: token === null ? null : { token, expires_in_s: expires },
});

const flush = () => new Promise((resolve) => queueMicrotask(resolve));

// ---------------------------------------------------------------------------- opening

test("connect opens /v1/realtime with the model in the query and no subprotocol without a key", () =>
  withFakes(({ sockets }) => {
    const { c, log } = client();
    c.connect();
    equal(sockets.length, 1);
    equal(sockets[0].url, URL_ + "?model=m");
    equal(sockets[0].protocols, []);
    equal(sockets[0].binaryType, "arraybuffer");
    equal(log.states[0], { state: "connecting", attempt: 0 });
  }));

test("an API key travels as the openai-insecure-api-key subprotocol", () =>
  withFakes(({ sockets }) => {
    client({ apiKey: "k1", model: null }).c.connect();
    equal(sockets[0].url, URL_);
    equal(sockets[0].protocols, ["realtime", "openai-insecure-api-key.k1"]);
  }));

test("session.created opens the session, numbers from its seq and keeps the resume token", () =>
  withFakes(({ sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0, "tok", 30));
    equal(c.state, "open");
    equal(c.lastSeq, 0);
    equal(c.sessionId, "sess_1");
    equal(c.resume, { token: "tok", expiresInS: 30, expiresAt: Infinity });
    equal(log.sessions, [{ kind: "new", afterLoss: false, resumable: true }]);
    equal(log.events.map((e) => e.type), ["session.created"]);
    equal(log.states.at(-1), { state: "open", resumable: true });
  }));

test("session.created without a resume token is not resumable", () =>
  withFakes(({ sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0, null));
    equal(c.resume, null);
    equal(log.sessions, [{ kind: "new", afterLoss: false, resumable: false }]);
  }));

// ---------------------------------------------------------------------------- seq

test("each seq is delivered once: repeats and older seqs are dropped and counted", () =>
  withFakes(({ sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0));
    for (const seq of [1, 2, 2, 1, 3, 0]) sockets[0].receive({ type: "x", seq });
    equal(log.events.slice(1).map((e) => e.seq), [1, 2, 3]);
    equal(c.duplicates, 3);
    equal(c.lastSeq, 3);
  }));

test("an event without a seq passes through and moves nothing", () =>
  withFakes(({ sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(4));
    sockets[0].receive({ type: "no.seq" });
    equal(log.events.map((e) => e.type), ["session.created", "no.seq"]);
    equal(c.lastSeq, 4);
  }));

test("binary frames, bad JSON and typeless messages are ignored", () =>
  withFakes(({ sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0));
    const junk = [new ArrayBuffer(8), "not json", "null", "[]", '{"type": 5}', '{"seq": 9}'];
    for (const raw of junk) sockets[0].receive(raw);
    equal(log.events.length, 1);
    equal(c.lastSeq, 0);
  }));

// ---------------------------------------------------------------------------- sending

test("send is refused until the session opens, then sends one JSON text frame", () =>
  withFakes(({ sockets }) => {
    const { c } = client();
    c.connect();
    equal(c.send({ type: "response.create" }), false, "before session.created");
    equal(sockets[0].sent, []);
    sockets[0].receive(created(0));
    equal(c.send({ type: "response.create", event_id: "e1" }), true);
    equal(JSON.parse(sockets[0].sent[0]), { type: "response.create", event_id: "e1" });
  }));

test("sendAudio sends binary frames and drops them past a 1 MiB backlog", () =>
  withFakes(({ sockets }) => {
    const { c } = client();
    c.connect();
    const frame = new ArrayBuffer(4);
    equal(c.sendAudio(frame), false, "before the session opens");
    sockets[0].receive(created(0));
    sockets[0].bufferedAmount = 1 << 20;
    equal(c.sendAudio(frame), true, "at the limit");
    sockets[0].bufferedAmount = (1 << 20) + 1;
    equal(c.sendAudio(frame), false, "past the limit");
    equal(sockets[0].sent.length, 1);
    assert(sockets[0].sent[0] === frame, "the frame was not sent as is");
  }));

// ---------------------------------------------------------------------------- resume

test("a dropped socket resumes with resume_token and the last seq applied", () =>
  withFakes(({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0, "tok"));
    for (const seq of [1, 2, 3]) sockets[0].receive({ type: "x", seq });
    sockets[0].drop(1006);
    equal(log.sessions.at(-1), { kind: "lost", code: 1006, reason: "", resumable: true });
    equal(log.states.at(-1), { state: "reconnecting", code: 1006, reason: "", inMs: 0 });
    equal(sockets.length, 1, "reconnected before its delay");
    clock.advance(0);
    equal(sockets.length, 2);
    equal(sockets[1].query.get("resume_token"), "tok");
    equal(sockets[1].query.get("last_seq"), "3");
    equal(sockets[1].query.get("model"), "m");
    equal(c.state, "resuming");
  }));

test("after session.resumed, replayed events apply once and live ones follow", () =>
  withFakes(({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0));
    sockets[0].receive({ type: "x", seq: 1 });
    sockets[0].receive({ type: "x", seq: 2 });
    sockets[0].drop();
    clock.advance(0);
    sockets[1].receive({ type: "session.resumed", replay_from_seq: 1 });
    for (const seq of [1, 2, 3, 3, 4]) sockets[1].receive({ type: "x", seq });
    equal(log.sessions.at(-1), { kind: "resumed", replayFrom: 1 });
    equal(c.state, "open");
    equal(c.lost, false);
    equal(log.events.map((e) => e.seq ?? e.type), [0, 1, 2, "session.resumed", 3, 4]);
    equal(c.duplicates, 3);
  }));

test("resume_failed abandons the socket and starts a fresh session numbered from 0", async () =>
  withFakes(async ({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0));
    for (const seq of [1, 2, 3, 4, 5]) sockets[0].receive({ type: "x", seq });
    sockets[0].drop();
    clock.advance(0);
    sockets[1].receive({ type: "error", error: { code: "resume_failed", message: "gone" } });
    equal(log.sessions.at(-1), { kind: "resume-failed", message: "gone" });
    equal(sockets[1].closedWith, { code: CLOSE_NORMAL, reason: "" });
    equal(sockets.length, 3);
    equal(sockets[2].query.has("resume_token"), false);
    equal(c.resume, null);
    equal(c.lastSeq, -1);
    await flush(); // socket 1's own close event arrives late and must change nothing
    equal(sockets.length, 3);
    sockets[2].receive(created(0, "tok2"));
    sockets[2].receive({ type: "x", seq: 1 });
    equal(log.sessions.at(-1), { kind: "new", afterLoss: true, resumable: true });
    equal(log.events.slice(-2).map((e) => e.seq), [0, 1]);
    assert(!log.events.some((e) => e.type === "error"), "resume_failed was passed on as an event");
  }));

test("session.created where a resume was asked for restarts the numbering", () =>
  withFakes(({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0));
    for (const seq of [1, 2, 3]) sockets[0].receive({ type: "x", seq });
    sockets[0].drop();
    clock.advance(0);
    sockets[1].receive(created(0, "tok2"));
    sockets[1].receive({ type: "x", seq: 1 });
    equal(c.lastSeq, 1);
    equal(c.resume.token, "tok2");
    equal(log.events.slice(-2).map((e) => e.seq), [0, 1]);
    equal(log.sessions.at(-1).afterLoss, true);
  }));

test("reconnects back off 0, 300, 700, 1500, 3000, 5000, 8000 ms, then stay at 8000", () =>
  withFakes(({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0, null));
    const delays = [];
    for (let k = 0; k < 9; k++) {
      sockets.at(-1).drop();
      const delay = log.states.at(-1).inMs;
      delays.push(delay);
      const before = sockets.length;
      if (delay > 0) {
        clock.advance(delay - 1);
        equal(sockets.length, before, `reconnected before ${delay} ms`);
      }
      clock.advance(delay > 0 ? 1 : 0);
      equal(sockets.length, before + 1, `not reconnected after ${delay} ms`);
      equal(c.state, "reconnecting");
    }
    equal(delays, [0, 300, 700, 1500, 3000, 5000, 8000, 8000, 8000]);
    sockets.at(-1).receive(created(0, null));
    sockets.at(-1).drop();
    equal(log.states.at(-1).inMs, 0, "an opened session resets the back-off");
  }));

test("a token is offered only within its grace period, counted from the drop", () =>
  withFakes(({ clock, sockets }) => {
    const { c } = client();
    c.connect();
    sockets[0].receive(created(0, "tok", 2));
    clock.advance(60_000); // time spent connected does not count
    sockets[0].drop();
    clock.advance(0);
    equal(sockets[1].query.get("resume_token"), "tok", "at 0 ms");
    sockets[1].drop(); // the resume attempt fails to connect: retry after 300 ms
    clock.advance(300);
    equal(sockets[2].query.get("resume_token"), "tok", "at 300 ms");
    sockets[2].drop(); // 700 ms more
    clock.advance(700);
    equal(sockets[3].query.get("resume_token"), "tok", "at 1000 ms");
    sockets[3].drop(); // 1500 ms more: past the 2 s grace
    clock.advance(1500);
    equal(sockets[4].query.has("resume_token"), false, "at 2500 ms");
    equal(c.lastSeq, -1);
    equal(c.state, "reconnecting");
  }));

test("a drop before any session opened is not a lost session", () =>
  withFakes(({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].drop(1006);
    equal(log.sessions, []);
    equal(c.lost, false);
    clock.advance(0);
    equal(log.states.at(-1), { state: "connecting", attempt: 1 });
  }));

// ---------------------------------------------------------------------------- close codes

test("1008 is refused for good: no reconnect", () =>
  withFakes(({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].drop(CLOSE_POLICY, "invalid API key");
    equal(log.states.at(-1), { state: "refused", code: 1008, reason: "invalid API key" });
    clock.advance(60_000);
    equal(sockets.length, 1);
  }));

test("4009 means resumed elsewhere: no reconnect", () =>
  withFakes(({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0));
    sockets[0].drop(CLOSE_SUPERSEDED, "");
    equal(log.states.at(-1), { state: "superseded", reason: "this session was resumed elsewhere" });
    clock.advance(60_000);
    equal(sockets.length, 1);
  }));

test("1009 and 1013 are reported with the loss and retried", () =>
  withFakes(({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0));
    sockets[0].drop(CLOSE_TOO_BIG, "frame too big");
    equal(log.sessions.at(-1), { kind: "lost", code: 1009, reason: "frame too big", resumable: true });
    clock.advance(0);
    sockets[1].receive(created(0));
    sockets[1].drop(CLOSE_TRY_AGAIN, "busy");
    equal(log.sessions.at(-1).code, 1013);
    clock.advance(0);
    equal(sockets.length, 3);
  }));

test("close() sends 1000 and never reconnects", async () =>
  withFakes(async ({ clock, sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0));
    c.close();
    equal(sockets[0].closedWith, { code: 1000, reason: "" });
    equal(log.states.at(-1), { state: "closed" });
    await flush();
    clock.advance(60_000);
    equal(sockets.length, 1);
    equal(c.send({ type: "x" }), false);
  }));

test("restart() drops the token and opens a fresh session; the old socket is ignored", async () =>
  withFakes(async ({ sockets }) => {
    const { c, log } = client();
    c.connect();
    sockets[0].receive(created(0, "tok"));
    sockets[0].receive({ type: "x", seq: 1 });
    c.restart();
    equal(sockets[0].closedWith, { code: 1000, reason: "" });
    equal(sockets.length, 2);
    equal(sockets[1].query.has("resume_token"), false);
    equal(c.lastSeq, -1);
    const seen = log.events.length;
    sockets[0].receive({ type: "late", seq: 99 });
    await flush();
    equal(log.events.length, seen, "an event from the old socket was delivered");
    equal(sockets.length, 2, "the old socket's close started a reconnect");
    equal(c.state, "reconnecting");
  }));

test("close codes are the protocol's numbers", () => {
  equal([CLOSE_NORMAL, CLOSE_POLICY, CLOSE_TOO_BIG, CLOSE_TRY_AGAIN, CLOSE_SUPERSEDED], [1000, 1008, 1009, 1013, 4009]);
});

test("realtimeUrl maps http to ws and https to wss on the page's host", () => {
  equal(realtimeUrl({ protocol: "http:", host: "127.0.0.1:8000" }), "ws://127.0.0.1:8000/v1/realtime");
  equal(realtimeUrl({ protocol: "https:", host: "chat.example" }), "wss://chat.example/v1/realtime");
  equal(realtimeUrl(), `ws://${window.location.host}/v1/realtime`);
});
