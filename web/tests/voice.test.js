// web/heard.js, speaker.js and rtc.js's pure parts: played samples → ms, greying the text past
// what was heard, decoding an audio delta, and asking the server whether it takes calls.

import { greyPast, playedMs, renderedLength } from "../heard.js";
import { probeWebRtc } from "../rtc.js";
import { base64ToPcm16 } from "../speaker.js";
import { renderMarkdown } from "../markdown.js";
import { equal, test } from "./harness.js";

function shown(md) {
  const div = document.createElement("div");
  div.append(renderMarkdown(md));
  return div;
}

function unheard(div) {
  return [...div.querySelectorAll(".unheard")].map((s) => s.textContent).join("");
}

test("played samples become whole milliseconds, never rounded up", () => {
  equal(playedMs(24000, 24000), 1000);
  equal(playedMs(23999, 24000), 999);
  equal(playedMs(36, 24000), 1);
  equal(playedMs(0, 24000), 0);
  equal(playedMs(-5, 24000), 0);
  equal(playedMs(100, 0), 0);
});

test("the text past the heard transcript is greyed, the rest left as it was", () => {
  const full = "The tide comes in twice a day. It goes out twice too.";
  const div = shown(full);
  const n = greyPast(div, renderedLength("The tide comes in", full));
  equal(div.textContent, full, "the text itself is unchanged");
  equal(unheard(div), " twice a day. It goes out twice too.");
  equal(n, unheard(div).length);
});

test("markdown marks in the heard transcript do not shift the cut", () => {
  const full = "Open **the kitchen** window now, please.";
  const div = shown(full);
  greyPast(div, renderedLength("Open **the kitchen** window", full));
  equal(unheard(div), " now, please.");
  equal(div.querySelector("strong").textContent, "the kitchen", "bold kept, not greyed");
});

test("a cut inside a bold run splits it and greys its end", () => {
  const full = "Open **the kitchen** window.";
  const div = shown(full);
  greyPast(div, renderedLength("Open the", full));
  equal(unheard(div), " kitchen window.");
});

test("nothing heard greys everything; all heard greys nothing", () => {
  const full = "One two three.";
  const none = shown(full);
  equal(greyPast(none, renderedLength("", full)), full.length);
  equal(unheard(none), full);
  const all = shown(full);
  equal(greyPast(all, renderedLength(full, full)), 0);
  equal(all.querySelectorAll(".unheard").length, 0);
});

test("an audio delta decodes to little-endian pcm16 samples", () => {
  const pcm = new Int16Array([0, 1, -1, 32767, -32768]);
  const b64 = btoa(String.fromCharCode(...new Uint8Array(pcm.buffer)));
  equal([...new Int16Array(base64ToPcm16(b64))], [0, 1, -1, 32767, -32768]);
  equal(base64ToPcm16(btoa("abc")).byteLength, 2, "an odd byte is dropped, not read as half a sample");
});

function fakeFetch(status, body) {
  const calls = [];
  const fn = async (url, opts) => {
    calls.push({ url, opts });
    return { ok: status >= 200 && status < 300, status, json: async () => body };
  };
  return { fn, calls };
}

test("a server that takes calls gives its ICE servers; the key goes as a bearer", async () => {
  const ice = [{ urls: "stun:stun.example.net:3478" }];
  const f = fakeFetch(200, { object: "realtime.calls", webrtc: true, ice_servers: ice });
  const r = await probeWebRtc("sk-1", f.fn);
  equal(r, { ok: true, iceServers: ice });
  equal(f.calls[0].url, "/v1/realtime/calls");
  equal(f.calls[0].opts.headers.Authorization, "Bearer sk-1");
});

test("no calls, a refused key or a network error mean the WebSocket", async () => {
  equal((await probeWebRtc(null, fakeFetch(404, {}).fn)).ok, false);
  equal((await probeWebRtc(null, fakeFetch(401, {}).fn)).status, 401);
  equal((await probeWebRtc(null, fakeFetch(200, { webrtc: false }).fn)).ok, false);
  const down = await probeWebRtc(null, async () => {
    throw new TypeError("Failed to fetch");
  });
  equal(down, { ok: false, status: 0, reason: "Failed to fetch" });
});
