// The OpenAI Agents SDK for JS in a browser page, unmodified: a RealtimeSession over its WebRTC
// transport, OpenAIRealtimeWebRTC({baseUrl}), pointed at the gateway's /v1/realtime/calls. The
// microphone is the page's own (Chromium's fake one in the test), as the SDK opens it by default.
// Bundled by esbuild in tests/e2e/browser_jsweb.py; the test reads window.agentsReport.
import { OpenAIRealtimeWebRTC, RealtimeAgent, RealtimeSession } from '@openai/agents-realtime';

function textOf(item) {
  return (item.content ?? []).map((c) => c.text ?? c.transcript ?? '').join('');
}

window.agentsRun = async (baseUrl, model) => {
  const report = { connected: false, callId: null, events: [], history: [], errors: [], agentEnds: 0 };
  window.agentsReport = report;
  const transport = new OpenAIRealtimeWebRTC({ baseUrl, useInsecureApiKey: true });
  const agent = new RealtimeAgent({ name: 'Assistant', instructions: 'Be brief.' });
  const session = new RealtimeSession(agent, { transport, model }); // the served model, as an app names its model
  window.agentsSession = session;
  session.on('transport_event', (ev) => report.events.push(ev.type));
  session.on('history_updated', (history) => {
    report.history = history
      .filter((i) => i.type === 'message')
      .map((i) => ({ role: i.role, status: i.status, text: textOf(i) }));
  });
  session.on('agent_end', () => {
    report.agentEnds += 1;
  });
  session.on('error', (e) => {
    const err = e.error?.error ?? e.error ?? e; // a server error event carries {error: {code, message}}
    report.errors.push(err instanceof Error ? { message: err.message } : JSON.parse(JSON.stringify(err)));
  });
  await session.connect({ apiKey: 'local' });
  report.connected = true;
  report.callId = transport.callId ?? null;
  return report.callId;
};
