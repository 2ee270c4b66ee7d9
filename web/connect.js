// Which transport the page uses: WebRTC when the server offers it (GET /v1/realtime/calls), else
// the WebSocket. ``?transport=websocket`` or ``?transport=webrtc`` forces one (the second still
// falls back when the call cannot be made); ``?rtc_timeout_ms=N`` sets how long a call may take to
// connect before the page gives up on it.

import { RealtimeClient, realtimeUrl } from "./protocol.js";
import { RTC_CONNECT_MS, RtcClient, probeWebRtc } from "./rtc.js";
import { h, notice } from "./views.js";

/** {transport: "auto"|"websocket"|"webrtc", connectMs} from the page's query. */
export function transportChoice(search = window.location.search) {
  const q = new URLSearchParams(search);
  const t = q.get("transport");
  const ms = Number(q.get("rtc_timeout_ms"));
  return {
    transport: t === "websocket" || t === "webrtc" ? t : "auto",
    connectMs: Number.isFinite(ms) && ms >= 500 && ms <= 120_000 ? ms : RTC_CONNECT_MS,
  };
}

/** A client for this page, not yet connected, and why that transport: {client, why}. */
export async function makeClient({ model, apiKey }, choice = transportChoice()) {
  const ws = () => new RealtimeClient({ url: realtimeUrl(), model, apiKey });
  if (choice.transport === "websocket") return { client: ws(), why: "asked for by the page's address" };
  const offer = await probeWebRtc(apiKey);
  if (!offer.ok && choice.transport === "auto") return { client: ws(), why: offer.reason };
  const client = new RtcClient({ model, apiKey, iceServers: offer.iceServers || [], connectMs: choice.connectMs });
  return { client, why: offer.ok ? "the server takes calls" : offer.reason };
}

/** The served model's id (GET /v1/models), or null. */
export async function servedModel() {
  try {
    const r = await fetch("/v1/models", { headers: { accept: "application/json" } });
    if (!r.ok) return null;
    const body = await r.json();
    return (body.data && body.data[0] && body.data[0].id) || null;
  } catch {
    return null;
  }
}

/** Show the API key form; ``onKey(key)`` gets what was typed (also kept in sessionStorage). */
export function askKeyForm(onKey) {
  const n = notice("This server needs an API key.", "error");
  const form = h("form", "key-form");
  const input = h("input");
  input.type = "password";
  input.autocomplete = "off";
  input.setAttribute("aria-label", "API key");
  input.placeholder = "API key";
  const go = h("button", "", "Connect");
  go.type = "submit";
  form.append(input, go);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    sessionStorage.setItem("stream-omni-key", key);
    form.remove();
    onKey(key);
  });
  n.append(form);
  input.focus();
}
