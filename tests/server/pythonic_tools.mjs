// Pythonic tool calls through the official openai client, against a server with
// --tool-call-parser pythonic. The random test model writes a call list only when told to,
// so the answers are shaped by guided_regex: a Python list of get_weather calls with
// keyword arguments. Whole and streamed answers must come back as those calls (the
// arguments as JSON, equal to what the text says), with no content; plain text stays
// content; forced calls are a 400 (Python arguments cannot be constrained).
import { MODEL, check, checkEqual, finish, makeClient } from "./common.mjs";

const client = makeClient();
const messages = [{ role: "user", content: "What is the weather?" }];
const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } } } } }];
const regex = '\\[get_weather\\(city="(Paris|Rome|Oslo)", days=[1-9]\\)(, get_weather\\(city="(Paris|Rome|Oslo)", days=[1-9]\\)){0,2}\\]';

// The text the model writes for the same prompt (messages and tools, rendered by /tokenize)
// and seed, through /v1/completions, which parses nothing.
async function rawText(seed) {
  const res = await fetch(`http://127.0.0.1:${process.env.PORT}/tokenize`, {
    method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${process.env.API_KEY}` },
    body: JSON.stringify({ model: MODEL, messages, tools, add_generation_prompt: true }),
  });
  const { tokens } = await res.json();
  const c = await client.completions.create({ model: MODEL, prompt: tokens, temperature: 1, seed, max_tokens: 120, guided_regex: regex });
  return c.choices[0].text;
}

// The calls the text names, read with a regex of its own (the oracle).
function callsIn(text) {
  return [...text.matchAll(/get_weather\(city="(\w+)", days=(\d)\)/g)].map((m) => ({ city: m[1], days: Number(m[2]) }));
}

for (let i = 0; i < 6; i++) {
  const body = { model: MODEL, messages, tools, temperature: 1, seed: 1200 + i, max_tokens: 120, guided_regex: regex };
  const text = await rawText(1200 + i);
  check(new RegExp(`^(?:${regex})$`).test(text), `request ${i}: the raw text is the list`, text);
  const whole = await client.chat.completions.create(body);
  const m = whole.choices[0].message;
  checkEqual(whole.choices[0].finish_reason, "tool_calls", `request ${i}: finish_reason`);
  checkEqual(m.content, null, `request ${i}: no content`);
  checkEqual((m.tool_calls ?? []).map((c) => [c.type, c.function.name]), callsIn(text).map(() => ["function", "get_weather"]), `request ${i}: the calls`);
  checkEqual((m.tool_calls ?? []).map((c) => JSON.parse(c.function.arguments)), callsIn(text), `request ${i}: their arguments`);

  const calls = [];
  let content = "";
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    const d = chunk.choices[0]?.delta ?? {};
    content += d.content ?? "";
    for (const c of d.tool_calls ?? []) calls.push(JSON.parse(c.function.arguments));
  }
  checkEqual({ calls, content }, { calls: callsIn(text), content: "" }, `request ${i}: streamed = whole`);
}

// Text that is not a call list stays content.
{
  const r = await client.chat.completions.create({ model: MODEL, messages, tools, temperature: 0, max_tokens: 16, guided_regex: "It is sunny[.]" });
  checkEqual([r.choices[0].message.content, (r.choices[0].message.tool_calls ?? []).length, r.choices[0].finish_reason], ["It is sunny.", 0, "stop"], "plain text stays content");
}
try {
  await client.chat.completions.create({ model: MODEL, messages, tools, tool_choice: "required", max_tokens: 16 });
  check(false, "tool_choice required: accepted");
} catch (e) {
  checkEqual([e.status, e.param], [400, "tool_choice"], "tool_choice required: a 400 naming it");
}
finish();
