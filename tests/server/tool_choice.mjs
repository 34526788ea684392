// tool_choice "required" and named functions through the official openai client, against a
// server with --tool-call-parser hermes (or mistral, with TOOL_MARKUP=mistral): every answer is tool calls (finish_reason
// "tool_calls"), each to a listed tool, its arguments valid under that tool's parameters
// schema (ajv, an independent validator); streamed calls equal the unstreamed ones;
// parallel_tool_calls false gives one call (the grammar allows one; calls the model writes
// beyond the first are dropped); and the 400s for what cannot be forced.
import { createRequire } from "node:module";
import path from "node:path";
import { MODEL, check, checkEqual, finish, makeClient, OpenAI } from "./common.mjs";

const require = createRequire(path.join(process.env.NODE_PATH ?? "", "noop.js"));
const Ajv = require("ajv");
const ajv = new Ajv({ strict: false, allErrors: true });
const client = makeClient();
const messages = [{ role: "user", content: "What is the weather in Paris, and the time in Tokyo?" }];

// Bounded strings: a random model ends only where the schema leaves nothing else.
const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather in a city",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", minLength: 1, maxLength: 12 },
          unit: { enum: ["celsius", "fahrenheit"] },
        },
        required: ["city", "unit"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "get_time",
      parameters: {
        type: "object",
        properties: { zone: { type: "string", maxLength: 8 }, offset: { type: "integer", minimum: -12, maximum: 14 } },
        required: ["zone"],
        additionalProperties: false,
      },
    },
  },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));

function checkCalls(choice, what, only, one = only !== undefined) {
  checkEqual(choice.finish_reason, "tool_calls", `${what}: finish_reason`);
  const calls = choice.message.tool_calls ?? [];
  check(!choice.message.content, `${what}: no content beside the calls`, choice.message.content);
  check(calls.length >= 1, `${what}: at least one call`, choice.message);
  if (one) checkEqual(calls.length, 1, `${what}: exactly one call`);
  for (const c of calls) {
    checkEqual(c.type, "function", `${what}: call type`);
    const validate = validators[c.function.name];
    check(validate !== undefined, `${what}: a listed tool`, c.function.name);
    if (only) checkEqual(c.function.name, only, `${what}: the named function`);
    let args;
    try {
      args = JSON.parse(c.function.arguments);
    } catch (e) {
      check(false, `${what}: arguments parse as JSON`, c.function.arguments);
      continue;
    }
    if (validate) check(validate(args), `${what}: arguments valid`, { args, errors: validate.errors });
  }
  return calls;
}

// --- "required": 20 sampled requests at temperature 1.
const required = await Promise.all(
  Array.from({ length: 20 }, (_, i) =>
    client.chat.completions.create({ model: MODEL, messages, tools, tool_choice: "required", temperature: 1, seed: 300 + i, max_tokens: 600 })));
const seen = new Set();
for (const [i, r] of required.entries()) {
  for (const c of checkCalls(r.choices[0], `required ${i}`)) seen.add(c.function.name);
}
check(seen.size >= 1, "required: some calls", [...seen]);

// --- A named function: exactly one call to it.
for (const name of ["get_weather", "get_time"]) {
  const r = await client.chat.completions.create({
    model: MODEL, messages, tools, temperature: 1, seed: 7, max_tokens: 600,
    tool_choice: { type: "function", function: { name } },
  });
  checkCalls(r.choices[0], `named ${name}`, name);
}

// --- Streamed: the same calls as unstreamed, for the same seed.
// The calls of a streamed answer ({index, name, arguments}) and its finish_reason.
async function streamedCalls(body) {
  const calls = [];
  let finishReason = null;
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
      if (d.id) calls.push({ index: d.index, name: d.function.name, arguments: d.function.arguments ?? "" });
      else if (d.function?.arguments) calls[calls.length - 1].arguments += d.function.arguments;
    }
    finishReason = chunk.choices[0]?.finish_reason ?? finishReason;
  }
  return { calls, finishReason };
}
const asStreamed = (message) => (message.tool_calls ?? []).map((c, index) => ({ index, name: c.function.name, arguments: c.function.arguments }));
const body = { model: MODEL, messages, tools, tool_choice: "required", temperature: 1, seed: 42, max_tokens: 600 };
const whole = await client.chat.completions.create(body);
const streamed = await streamedCalls(body);
checkEqual(streamed.finishReason, "tool_calls", "streamed finish_reason");
checkEqual(streamed.calls, asStreamed(whole.choices[0].message), "streamed calls equal the unstreamed ones");

// --- parallel_tool_calls false with "required": the grammar allows exactly one call.
const single = await Promise.all(
  Array.from({ length: 8 }, (_, i) =>
    client.chat.completions.create({ ...body, parallel_tool_calls: false, seed: 500 + i })));
for (const [i, r] of single.entries()) {
  checkCalls(r.choices[0], `parallel_tool_calls false ${i}`, undefined, true);
  if (i < 3) {
    const s = await streamedCalls({ ...body, parallel_tool_calls: false, seed: 500 + i });
    checkEqual(s.finishReason, "tool_calls", `parallel_tool_calls false ${i}: streamed finish_reason`);
    checkEqual(s.calls, asStreamed(r.choices[0].message), `parallel_tool_calls false ${i}: streamed = unstreamed`);
  }
}

// --- Two calls the model is made to write (guided_regex; tool_choice "auto" parses them):
// both come back, or with parallel_tool_calls false only the first (vLLM's filter), streamed
// and not.
const mistral = process.env.TOOL_MARKUP === "mistral";
const weatherCall = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}';
const timeCall = '{"name": "get_time", "arguments": {"zone": "JST"}}';
const twoCalls = mistral ? `[TOOL_CALLS][${weatherCall}, ${timeCall}]`
                         : `<tool_call>\n${weatherCall}\n</tool_call><tool_call>\n${timeCall}\n</tool_call>`;
const escapeRegex = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const guided = { model: MODEL, messages, tools, tool_choice: "auto", temperature: 1, seed: 9, max_tokens: 200, guided_regex: escapeRegex(twoCalls) };
for (const parallel of [true, false]) {
  const what = `two written calls, parallel_tool_calls ${parallel}`;
  const r = await client.chat.completions.create({ ...guided, parallel_tool_calls: parallel });
  checkEqual(r.choices[0].finish_reason, "tool_calls", `${what}: finish_reason`);
  checkEqual((r.choices[0].message.tool_calls ?? []).map((c) => c.function.name),
             parallel ? ["get_weather", "get_time"] : ["get_weather"], `${what}: calls`);
  checkCalls(r.choices[0], what, undefined, !parallel);
  const s = await streamedCalls({ ...guided, parallel_tool_calls: parallel });
  checkEqual(s.finishReason, "tool_calls", `${what}: streamed finish_reason`);
  checkEqual(s.calls, asStreamed(r.choices[0].message), `${what}: streamed = unstreamed`);
}

// --- What cannot be forced is a 400 naming tool_choice.
async function expect400(extra, what, needle) {
  try {
    await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, ...extra });
    check(false, `${what}: rejected`);
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, `${what}: a 400`, String(e));
    checkEqual(e.param, "tool_choice", `${what}: param`);
    check(String(e.message).includes(needle), `${what}: message`, e.message);
  }
}
// --- Tools whose parameters are any object (as agent frameworks send them): compiled, not a
// 400 (two were refused before session 20). A random model writes free-form strings until
// max_tokens, so the answer is either complete calls or, cut short, the start of one.
const freeTools = ["search", "run", "note", "open"].map((name) => ({ type: "function", function: { name, parameters: { type: "object" } } }));
for (const seed of [1, 2, 3]) {
  const r = await client.chat.completions.create({ model: MODEL, messages, tools: freeTools, tool_choice: "required", temperature: 1, seed, max_tokens: 40 });
  const choice = r.choices[0];
  if (choice.finish_reason === "tool_calls") {
    for (const c of choice.message.tool_calls) {
      check(freeTools.some((t) => t.function.name === c.function.name), `free-form ${seed}: a listed tool`, c.function.name);
      const args = JSON.parse(c.function.arguments);
      check(typeof args === "object" && !Array.isArray(args), `free-form ${seed}: an object`, c.function.arguments);
    }
  } else {
    checkEqual(choice.finish_reason, "length", `free-form ${seed}: finish_reason`);
    const start = mistral ? /^\[TOOL_CALLS\]\[\{ ?"name" ?: ?"/ : /^<tool_call>\n\{ ?"name" ?: ?"/;
    check(start.test(choice.message.content ?? ""), `free-form ${seed}: the start of a call`,
          choice.message.content);
  }
}

await expect400({ tool_choice: "required" }, "required without tools", "'tools'");
await expect400({ tools, tool_choice: { type: "function", function: { name: "nope" } } }, "unknown function", "'nope'");
await expect400({ tools, tool_choice: "sometimes" }, "unknown form", "must be");
await expect400({ tools, tool_choice: "required", response_format: { type: "json_object" } }, "with response_format", "give one");
try {
  await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, tools, tool_choice: "required", parallel_tool_calls: "no" });
  check(false, "parallel_tool_calls \"no\": rejected");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError, "parallel_tool_calls \"no\": a 400", String(e));
  checkEqual(e.param, "parallel_tool_calls", "parallel_tool_calls \"no\": param");
}

finish();
