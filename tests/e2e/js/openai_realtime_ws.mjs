// The `openai` npm package's OpenAIRealtimeWS against stream-omni, unmodified: it builds its wss://
// URL from the client's baseURL (it dials nothing else), so the server serves TLS itself and the
// test trusts its certificate through NODE_EXTRA_CA_CERTS. One scenario per run:
//
//   node openai_realtime_ws.mjs text|tool <https base URL, …/v1> <model>
//
// prints one JSON report (tests/e2e/test_js_openai_realtime.py asserts on it).
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

import { makeReport, plain } from './report.mjs';

const [scenario, baseURL, model] = process.argv.slice(2);
const { report, end, onEnd } = makeReport(scenario);
Object.assign(report, { url: null, texts: [], toolCalls: [], statuses: [] });

const WEATHER = {
  type: 'function',
  name: 'get_weather',
  description: 'Current weather of a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const session = {
  text: { type: 'realtime', output_modalities: ['text'], instructions: 'Be brief.' },
  tool: { type: 'realtime', output_modalities: ['text'], instructions: 'Help.', tools: [WEATHER] },
}[scenario];
const question = { text: 'Hello', tool: 'What is the weather in Paris?' }[scenario];
if (!session) end(`unknown scenario ${scenario}`);

const client = new OpenAI({ apiKey: 'local', baseURL });
const rt = new OpenAIRealtimeWS({ model }, client);
report.url = rt.url.toString();
onEnd(() => rt.close());

let text = '';
let outputSent = false;
rt.on('error', (err) => report.errors.push(plain(err)));
rt.on('event', (event) => report.serverEvents.push(event.item?.type ? `${event.type}/${event.item.type}` : event.type));
rt.on('response.output_text.delta', (event) => {
  text += event.delta;
});
rt.on('response.output_item.done', (event) => {
  const item = event.item;
  if (item.type !== 'function_call' || item.status !== 'completed') return;
  const { city } = JSON.parse(item.arguments);
  report.toolCalls.push({ name: item.name, city });
  // the output goes back the moment the call is done, before its response.done (GA behaviour)
  rt.send({
    type: 'conversation.item.create',
    item: { type: 'function_call_output', call_id: item.call_id, output: `sunny, 21 degrees in ${city}` },
  });
  outputSent = true;
});
rt.on('response.done', (event) => {
  report.texts.push(text);
  const reason = event.response.status_details?.reason;
  report.statuses.push(reason ? `${event.response.status}/${reason}` : event.response.status);
  text = '';
  if (scenario === 'text' || report.texts.some((t) => t.includes('sunny and 21'))) {
    end();
  } else if (outputSent && report.texts.length === 1) {
    rt.send({ type: 'response.create' }); // the answer, now that the model has the tool's output
  } else {
    end(`no tool call and no answer; texts: ${JSON.stringify(report.texts)}`);
  }
});

rt.socket.on('open', () => {
  rt.send({ type: 'session.update', session });
  rt.send({
    type: 'conversation.item.create',
    item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: question }] },
  });
  rt.send({ type: 'response.create' });
});
rt.socket.on('close', (code) => end(`the socket closed (${code}) before the scenario ended`));
