// The OpenAI Agents SDK for JS (@openai/agents-realtime) against stream-omni, unmodified: a
// RealtimeSession over OpenAIRealtimeWebSocket({url}) with the SDK's own defaults (its model, its
// session config: audio out, semantic VAD). One scenario per run:
//
//   node agents_realtime.mjs text|tool|voice <ws url> [24 kHz pcm16 file, for voice]
//
// prints one JSON report (tests/e2e/test_js_agents_realtime.py asserts on it).
import { readFileSync } from 'node:fs';
import { setImmediate as turn } from 'node:timers/promises';

import { OpenAIRealtimeWebSocket, RealtimeAgent, RealtimeSession, tool } from '@openai/agents-realtime';
import { z } from 'zod';

// The SDK's own schema of server events. An event of a type it knows that fails this schema is
// treated as "generic" and silently ignored, so the test checks every such event here.
import { realtimeServerEventSchema } from './node_modules/@openai/agents-realtime/dist/openaiRealtimeEvents.mjs';
import { makeReport, plain } from './report.mjs';

const [scenario, url, audioPath] = process.argv.slice(2);
const { report, end, onEnd } = makeReport(scenario);
const known = new Set(realtimeServerEventSchema.options.map((o) => o.shape.type.value));
Object.assign(report, { dropped: [], toolCalls: [], agentEnds: [], audioBytes: 0, history: [] });

function textOf(item) {
  return (item.content ?? []).map((c) => c.text ?? c.transcript ?? '').join('');
}

function summary(item) {
  const { type, role, status, name, arguments: args, output } = item;
  return { type, role, status, name, arguments: args, output, text: item.type === 'message' ? textOf(item) : null };
}

const getWeather = tool({
  name: 'get_weather',
  description: 'Current weather of a city.',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    report.toolCalls.push(city);
    return `sunny, 21 degrees in ${city}`;
  },
});

const assistantTexts = (s) => s.history.filter((i) => i.type === 'message' && i.role === 'assistant').map(textOf);
const userTranscripts = (s) => s.history.filter((i) => i.type === 'message' && i.role === 'user').map(textOf);

const scenarios = {
  text: {
    agent: new RealtimeAgent({ name: 'Assistant', instructions: 'Be brief.' }),
    start: (s) => s.sendMessage('Hello'),
    done: (s) => report.agentEnds.length >= 1 && assistantTexts(s).some((t) => t.length > 0),
  },
  tool: {
    agent: new RealtimeAgent({ name: 'Assistant', instructions: 'Help.', tools: [getWeather] }),
    start: (s) => s.sendMessage('What is the weather in Paris?'),
    // the answer after the tool: the SDK sent the output and asked for it, the server used the output
    done: (s) =>
      report.agentEnds.some((e) => e.output.includes('sunny and 21')) &&
      assistantTexts(s).some((t) => t.includes('sunny and 21')),
  },
  voice: {
    agent: new RealtimeAgent({ name: 'Assistant', instructions: 'Be brief.' }),
    start: async (s) => {
      const pcm = readFileSync(audioPath);
      const step = 4800; // 100 ms of 24 kHz pcm16
      for (let i = 0; i < pcm.length; i += step) {
        const chunk = pcm.subarray(i, Math.min(i + step, pcm.length));
        s.sendAudio(chunk.buffer.slice(chunk.byteOffset, chunk.byteOffset + chunk.length));
        await turn(); // let the socket write as we go, as a microphone would
      }
    },
    // the transcript reaches the history through the SDK's conversation.item.retrieve
    done: (s) => report.agentEnds.length >= 1 && userTranscripts(s).some((t) => t.length > 0),
  },
};

const chosen = scenarios[scenario];
if (!chosen) end(`unknown scenario ${scenario}`);
const transport = new OpenAIRealtimeWebSocket({ url });
const session = new RealtimeSession(chosen.agent, { transport });

transport.on('*', (event) => {
  // item events carry their item's type ("conversation.item.added/function_call_output"): the test reads the order
  report.serverEvents.push(event.item?.type ? `${event.type}/${event.item.type}` : event.type);
  if (known.has(event.type)) {
    const parsed = realtimeServerEventSchema.safeParse(event);
    if (!parsed.success) {
      const issues = parsed.error.issues.slice(0, 3).map((i) => `${i.path.join('.')}: ${i.message}`);
      report.dropped.push({ type: event.type, issues });
    }
  }
});
session.on('error', (event) => report.errors.push(plain(event.error)));
session.on('audio', (event) => {
  report.audioBytes += event.data.byteLength;
});
session.on('agent_end', (_ctx, agent, output) => {
  report.agentEnds.push({ agent: agent.name, output });
  if (chosen.done(session)) end();
});
session.on('history_updated', () => {
  if (chosen.done(session)) end();
});
onEnd(() => {
  report.history = session.history.map(summary);
  session.close();
});

try {
  await session.connect({ apiKey: 'local' });
  await chosen.start(session);
} catch (err) {
  end(err);
}
