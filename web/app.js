// Stream-Omni browser chat client: the page's behaviour. Speaks only PROTOCOL.md.

import { dragHasFiles, imageFiles } from "./attachments.js";
import { cameraAvailable, snapshot } from "./camera.js";
import { AttachmentTray, MicControl } from "./controls.js";
import { askKeyForm, makeClient, servedModel } from "./connect.js";
import { CLOSE_TOO_BIG, CLOSE_TRY_AGAIN, RealtimeClient, realtimeUrl } from "./protocol.js";
import { CallMicrophone } from "./rtc.js";
import { VoiceOut } from "./voiceout.js";
import {
  ui,
  errorWords,
  rid,
  append,
  stick,
  notice,
  ResponseView,
  userMessage,
} from "./views.js";

// ---------------------------------------------------------------------------- state

const state = {
  client: null,
  responses: new Map(), // response id → ResponseView
  active: null, // the ResponseView in progress
  owners: new Map(), // output item id → ResponseView
  pending: new Map(), // item id we sent → {eventId, view, modalities}
  awaitingResponse: null, // event_id of a response.create not yet answered
  voiceTurns: new Map(), // input audio item id → view
  attachments: new AttachmentTray(),
  stopAfterResume: false,
  mic: new MicControl(
    (buf) => state.client && state.client.sendAudio(buf),
    () => (state.client && state.client.transport === "webrtc" ? new CallMicrophone(state.client) : null),
  ),
  voice: null, // VoiceOut: the speaker, set below
};
state.voice = new VoiceOut({
  client: () => state.client,
  responseFor: (ev) => responseFor(ev),
  owner: (itemId) => state.owners.get(itemId),
  changed: () => refreshControls(),
});

function busy() {
  return state.active !== null || state.awaitingResponse !== null || state.pending.size > 0;
}

function refreshControls() {
  const open = state.client !== null && state.client.state === "open";
  ui.send.disabled = !open || busy();
  const playing = state.voice.playing;
  ui.stop.disabled = (state.active === null || state.active.stopping === true) && !playing;
  ui.stop.classList.toggle("armed", state.active !== null || playing);
  ui.stop.textContent = state.active && state.active.stopping ? "Stopping…" : "Stop";
}

// ---------------------------------------------------------------------------- connection indicator

const CONN_WORDS = {
  idle: "Not connected",
  connecting: "Connecting…",
  open: "Connected",
  reconnecting: "Reconnecting…",
  resuming: "Resuming…",
  refused: "Refused",
  superseded: "Open in another tab",
  closed: "Disconnected",
};

function showConnection(detail) {
  const s = detail.state;
  ui.conn.dataset.state = s;
  if (state.client) ui.conn.dataset.transport = state.client.transport;
  let words = CONN_WORDS[s] || s;
  if (s === "refused" && detail.reason) words = `Refused: ${detail.reason}`;
  ui.connLabel.textContent = words;
  const c = state.client;
  ui.conn.title =
    s === "open" && c
      ? `${c.transport} · session ${c.sessionId || "?"} · last event #${c.lastSeq}${c.resume ? " · resumable" : ""}`
      : words;
  refreshControls();
}

// ---------------------------------------------------------------------------- sending

function sendMessage() {
  const c = state.client;
  const text = ui.input.value.trim();
  const images = state.attachments.items.slice();
  if (!text && images.length === 0) return;
  if (!c || c.state !== "open") {
    flashHint("Not connected yet. Your message is still in the box.");
    return;
  }
  if (busy()) {
    flashHint("A reply is still being written. Press Stop (or Esc) first.");
    return;
  }
  const itemId = rid("item_web_");
  const eventId = rid("evt_");
  // images before the question, as vision chat templates put them: a small model answers what comes last
  const content = images.map((im) => ({ type: "input_image", image_url: im.dataUrl }));
  if (text) content.push({ type: "input_text", text });
  const view = userMessage({ text, images });
  view.status.textContent = "Sending…";
  const modalities = ui.imageMode.getAttribute("aria-pressed") === "true" ? ["text", "image"] : null;
  state.pending.set(itemId, { eventId, view, modalities });
  c.send({
    type: "conversation.item.create",
    event_id: eventId,
    item: { id: itemId, type: "message", role: "user", content },
  });
  ui.input.value = "";
  autosize();
  state.attachments.clear();
  refreshControls();
}

function onItemAdded(item) {
  if (!item) return;
  const p = state.pending.get(item.id);
  if (p) {
    // the server has our message: now ask for the reply
    state.pending.delete(item.id);
    p.view.status.textContent = "";
    p.view.el.dataset.itemId = item.id;
    const eventId = rid("evt_");
    state.awaitingResponse = eventId;
    const response = p.modalities ? { output_modalities: p.modalities } : {};
    state.client.send({ type: "response.create", event_id: eventId, response });
    refreshControls();
    return;
  }
  if (item.role === "user" && item.content && item.content.some((c) => c.type === "input_audio")) {
    voiceTurn(item.id);
  }
}

function stopReply() {
  state.voice.halt("stop");
  const r = state.active;
  if (!r || r.stopping) return;
  r.stopping = true;
  r.setStatus("in_progress", "Stopping…");
  if (!state.client.send({ type: "response.cancel", response_id: r.id })) state.stopAfterResume = true;
  refreshControls();
}

let hintTimer = null;
function flashHint(words) {
  ui.hint.textContent = words;
  ui.hint.classList.add("flash");
  clearTimeout(hintTimer);
  hintTimer = setTimeout(() => {
    ui.hint.textContent = ui.hint.dataset.default;
    ui.hint.classList.remove("flash");
  }, 4000);
}

// ---------------------------------------------------------------------------- server events

function responseFor(ev) {
  return (
    (ev.response_id && state.responses.get(ev.response_id)) || (ev.item_id && state.owners.get(ev.item_id)) || state.active
  );
}

// One handler per server event type; a type with no handler is ignored (the protocol may add
// events, and a client must tolerate ones it does not know).
const imageGenerating = (ev) => {
  const r = responseFor(ev);
  if (r) r.image(ev.item_id, ev.output_index).status("Generating an image…");
};

const ON_SERVER_EVENT = {
  "session.created": (ev) => {
    if (ev.session && ev.session.model) ui.model.textContent = ev.session.model;
  },
  "conversation.item.added": (ev) => onItemAdded(ev.item),
  "input_audio_buffer.speech_started": (ev) => {
    state.voice.halt("barge-in"); // the user talks over the reply: stop its voice now
    voiceTurn(ev.item_id);
    state.mic.status("Hearing you…");
  },
  "input_audio_buffer.speech_stopped": () => state.mic.status("Transcribing…"),
  "input_audio_buffer.committed": (ev) => voiceTurn(ev.item_id),
  "conversation.item.input_audio_transcription.delta": (ev) => {
    const v = voiceTurn(ev.item_id);
    v.transcript += ev.delta || "";
    v.p.textContent = v.transcript;
    v.el.classList.remove("pending");
    stick();
  },
  "conversation.item.input_audio_transcription.completed": (ev) => {
    const v = voiceTurn(ev.item_id);
    v.transcript = ev.transcript || "";
    v.p.textContent = v.transcript || "(no words recognised)";
    v.el.classList.remove("pending");
    v.el.dataset.final = "true";
    state.mic.status(state.mic.active ? "Listening…" : "");
    stick();
  },
  "conversation.item.input_audio_transcription.failed": (ev) => {
    const v = voiceTurn(ev.item_id);
    v.el.classList.remove("pending");
    v.p.textContent = "(could not transcribe)";
    v.status.textContent = errorWords(ev.error && ev.error.code, ev.error && ev.error.message);
  },
  "response.created": (ev) => {
    const r = new ResponseView(ev.response.id);
    state.responses.set(r.id, r);
    state.active = r;
    state.awaitingResponse = null;
    refreshControls();
  },
  "response.output_item.added": (ev) => {
    const r = responseFor(ev);
    if (!r || !ev.item) return;
    state.owners.set(ev.item.id, r);
    if (ev.item.type === "image_generation_call") r.image(ev.item.id, ev.output_index);
    else r.text(ev.item.id, ev.output_index);
  },
  "response.output_text.delta": (ev) => {
    const r = responseFor(ev);
    if (!r) return;
    r.text(ev.item_id, ev.output_index).append(ev.delta || "");
    r.waiting.remove();
  },
  "response.output_text.done": (ev) => {
    const r = responseFor(ev);
    if (r) r.text(ev.item_id, ev.output_index).done(ev.text);
  },
  "response.image_generation_call.in_progress": imageGenerating,
  "response.image_generation_call.generating": imageGenerating,
  "response.image_generation_call.partial_image": (ev) => {
    const r = responseFor(ev);
    if (r) r.image(ev.item_id, ev.output_index).preview(ev.partial_image_b64, ev.partial_image_index ?? 0);
    stick();
  },
  "response.image_generation_call.completed": (ev) => {
    const r = responseFor(ev);
    if (r) r.image(ev.item_id, ev.output_index).status("Finishing the image…");
  },
  "response.output_item.done": (ev) => {
    const r = responseFor(ev);
    if (r && ev.item && ev.item.type === "image_generation_call") {
      r.image(ev.item.id, ev.output_index).done(ev.item);
      stick();
    }
  },
  "response.done": (ev) => finishResponse(ev.response),
  error: (ev) => onServerError(ev.error || {}),
  ...state.voice.handlers(),
};

function onServerEvent(ev) {
  // Object.hasOwn: an event type such as "constructor" or "__proto__" must not reach Object.prototype
  if (Object.hasOwn(ON_SERVER_EVENT, ev.type)) ON_SERVER_EVENT[ev.type](ev);
  showConnection({ state: state.client.state });
}

function finishResponse(resp) {
  const r = state.responses.get(resp.id);
  if (!r) return;
  const d = resp.status_details || {};
  let words;
  if (resp.status === "cancelled" && d.reason === "turn_detected") words = "Stopped: you started speaking.";
  if (resp.status === "failed") {
    const code = d.error && d.error.code;
    words = `The reply failed: ${errorWords(code, d.error && d.error.message)}`;
  }
  r.setStatus(resp.status, words);
  r.setFigures(resp.metrics);
  r.stopping = false;
  if (state.active === r) state.active = null;
  if (state.awaitingResponse) state.awaitingResponse = null;
  refreshControls();
}

function onServerError(err) {
  const code = err.code;
  if (state.voice.ownError(err)) return; // a truncate or retrieve of ours: the page's business, not the user's
  if (code === "response_cancel_not_active") return; // Stop raced with the end of the reply
  if (code === "resume_failed") return; // said by the "session" handler
  for (const [itemId, p] of state.pending) {
    if (err.event_id && err.event_id === p.eventId) {
      state.pending.delete(itemId);
      p.view.el.classList.add("failed");
      p.view.el.dataset.status = "failed";
      p.view.status.textContent = `Not sent: ${errorWords(code, err.message)}`;
      p.view.status.setAttribute("role", "alert");
      refreshControls();
      return;
    }
  }
  if (err.event_id && err.event_id === state.awaitingResponse) state.awaitingResponse = null;
  if (code === "audio_disabled" && state.mic.active) state.mic.stop();
  const n = notice(errorWords(code, err.message), "error");
  n.dataset.code = code || "";
  refreshControls();
}

function interruptAll(words) {
  for (const r of state.responses.values()) {
    if (r.el.dataset.status === "in_progress" || r.el.dataset.status === "resuming") {
      r.setStatus("interrupted", words);
    }
  }
  state.active = null;
  state.awaitingResponse = null;
  for (const p of state.pending.values()) {
    p.view.el.classList.add("failed");
    p.view.status.textContent = "Not sent: the connection was lost.";
  }
  state.pending.clear();
  state.stopAfterResume = false;
  refreshControls();
}

function onSession(d) {
  if (d.kind === "lost") {
    const why = d.code === CLOSE_TOO_BIG ? " (the last message was too large for the server)" : "";
    const busyWhy = d.code === CLOSE_TRY_AGAIN ? ` (${d.reason || "the server asked to try again"})` : "";
    if (d.code === CLOSE_TOO_BIG || d.code === CLOSE_TRY_AGAIN) notice(`The connection was closed${why}${busyWhy}.`, "warn");
    if (state.active) state.active.setStatus("resuming", d.resumable ? "Connection lost: resuming…" : "Connection lost…");
  } else if (d.kind === "resumed") {
    for (const r of state.responses.values()) {
      if (r.el.dataset.status === "resuming") r.setStatus("in_progress", r.stopping ? "Stopping…" : "");
    }
    notice("Reconnected: the session was resumed where it left off.", "info").classList.add("quiet");
    if (state.stopAfterResume && state.active) state.client.send({ type: "response.cancel", response_id: state.active.id });
    state.stopAfterResume = false;
  } else if (d.kind === "resume-failed") {
    interruptAll("Cut off: the session could not be resumed.");
    notice(
      `Could not resume the session${d.message ? ` (${d.message})` : ""}. A new session has started: ` +
        "the reply in progress is incomplete, and the model no longer remembers the earlier messages.",
      "error",
    );
    state.resumeFailedShown = true;
  }
  if (d.kind === "new") state.voice.sessionStarted();
  if (d.kind === "new" && d.afterLoss) {
    if (!state.resumeFailedShown) {
      interruptAll();
      notice(
        "The connection was lost and the session could not be resumed, so a new session has started. " +
          "The model no longer remembers the earlier messages.",
        "error",
      );
    }
    state.resumeFailedShown = false;
  }
  refreshControls();
}

// ---------------------------------------------------------------------------- voice

function voiceTurn(itemId) {
  let v = state.voiceTurns.get(itemId);
  if (!v) {
    const view = userMessage({ text: "…", voice: true });
    view.el.classList.add("pending");
    view.el.dataset.itemId = itemId;
    v = { ...view, transcript: "" };
    state.voiceTurns.set(itemId, v);
  }
  return v;
}

// ---------------------------------------------------------------------------- wiring

function autosize() {
  ui.input.style.height = "auto";
  ui.input.style.height = `${Math.min(ui.input.scrollHeight, 200)}px`;
}

ui.hint.dataset.default = ui.hint.textContent;
ui.form.addEventListener("submit", (e) => {
  e.preventDefault();
  sendMessage();
});
ui.input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    sendMessage();
  }
});
ui.input.addEventListener("input", autosize);
ui.input.addEventListener("paste", (e) => {
  const files = imageFiles(e.clipboardData).filter((f) => f.type.startsWith("image/"));
  if (files.length) {
    e.preventDefault();
    state.attachments.add(files);
  }
});
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && (state.active || state.voice.playing)) {
    e.preventDefault();
    stopReply();
  }
});
ui.stop.addEventListener("click", stopReply);
ui.attach.addEventListener("click", () => ui.file.click());
ui.camera.hidden = !cameraAvailable();
ui.camera.addEventListener("click", async () => {
  try {
    state.attachments.add([await snapshot()]);
  } catch (e) {
    flashHint(`Camera: ${e.message}`);
  }
});
ui.file.addEventListener("change", () => {
  state.attachments.add([...ui.file.files]);
  ui.file.value = "";
});
ui.mic.addEventListener("click", () => state.mic.toggle());
ui.speaker.addEventListener("click", () => state.voice.toggle());
ui.imageMode.addEventListener("click", () => {
  const on = ui.imageMode.getAttribute("aria-pressed") !== "true";
  ui.imageMode.setAttribute("aria-pressed", String(on));
});

let dragDepth = 0;
document.addEventListener("dragenter", (e) => {
  if (!dragHasFiles(e)) return;
  dragDepth++;
  ui.dropzone.hidden = false;
});
document.addEventListener("dragleave", () => {
  dragDepth = Math.max(0, dragDepth - 1);
  if (dragDepth === 0) ui.dropzone.hidden = true;
});
document.addEventListener("dragover", (e) => {
  if (dragHasFiles(e)) e.preventDefault();
});
document.addEventListener("drop", (e) => {
  if (!dragHasFiles(e)) return;
  e.preventDefault();
  dragDepth = 0;
  ui.dropzone.hidden = true;
  state.attachments.add(imageFiles(e.dataTransfer).filter((f) => f.type.startsWith("image/")));
});

async function main() {
  const model = await servedModel();
  if (model) ui.model.textContent = model;
  const { client, why } = await makeClient({ model, apiKey: sessionStorage.getItem("stream-omni-key") });
  console.info(`stream-omni: ${client.transport} (${why})`);
  use(client);
  client.connect();
  refreshControls();
}

// The page's client: its events drive the page. A WebRTC call that cannot be made hands its session
// to a WebSocket client ("fallback"), which resumes it if it had started.
function use(client) {
  state.client = client;
  client.addEventListener("state", (e) => {
    showConnection(e.detail);
    if (e.detail.state === "refused" && /api key/i.test(e.detail.reason || "")) askForKey();
    else if (e.detail.state === "refused") notice(`The server refused the connection: ${e.detail.reason}.`, "error");
    if (e.detail.state === "superseded") {
      interruptAll("This conversation continued in another tab.");
      notice("This session was resumed in another tab or window; this page has stopped.", "warn");
    }
  });
  client.addEventListener("session", (e) => onSession(e.detail));
  client.addEventListener("event", (e) => onServerEvent(e.detail));
  client.addEventListener("fallback", (e) => fallBack(client, e.detail.reason));
  window.streamOmni = { client, state }; // for debugging from the console
}

async function fallBack(rtc, reason) {
  if (state.client !== rtc) return;
  console.warn(`stream-omni: WebRTC failed (${reason}); using the WebSocket`);
  state.fallbackReason = reason;
  if (state.mic.active) {
    await state.mic.stop();
    notice("The call could not be kept up, so the page switched to a WebSocket: turn the mic on again.", "warn");
  }
  const ws = new RealtimeClient({ url: realtimeUrl(), model: rtc.model, apiKey: rtc.apiKey });
  use(ws);
  await state.voice.transportChanged();
  ws.adopt(rtc);
}

function askForKey() {
  askKeyForm((key) => {
    state.client.apiKey = key;
    state.client.connect();
  });
}

main();
