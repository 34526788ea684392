// tool_choice "required" and named functions through the official openai client, against a
// server with --tool-call-parser hermes: every answer is tool calls (finish_reason
// "tool_calls"), each to a listed tool, its arguments valid under that tool's parameters
// schema (ajv, an independent validator); streamed calls equal the unstreamed ones; and the
// 400s for what cannot be forced.
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

function checkCalls(choice, what, only) {
  checkEqual(choice.finish_reason, "tool_calls", `${what}: finish_reason`);
  const calls = choice.message.tool_calls ?? [];
  check(!choice.message.content, `${what}: no content beside the calls`, choice.message.content);
  check(calls.length >= 1, `${what}: at least one call`, choice.message);
  if (only) checkEqual(calls.length, 1, `${what}: exactly one call`);
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
const body = { model: MODEL, messages, tools, tool_choice: "required", temperature: 1, seed: 42, max_tokens: 600 };
const whole = await client.chat.completions.create(body);
const stream = await client.chat.completions.create({ ...body, stream: true });
const streamed = [];
let finishReason = null;
for await (const chunk of stream) {
  for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
    if (d.id) streamed.push({ name: d.function.name, arguments: d.function.arguments ?? "" });
    else if (d.function?.arguments) streamed[streamed.length - 1].arguments += d.function.arguments;
  }
  finishReason = chunk.choices[0]?.finish_reason ?? finishReason;
}
checkEqual(finishReason, "tool_calls", "streamed finish_reason");
checkEqual(streamed, whole.choices[0].message.tool_calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments })),
           "streamed calls equal the unstreamed ones");

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
await expect400({ tool_choice: "required" }, "required without tools", "'tools'");
await expect400({ tools, tool_choice: { type: "function", function: { name: "nope" } } }, "unknown function", "'nope'");
await expect400({ tools, tool_choice: "sometimes" }, "unknown form", "must be");
await expect400({ tools, tool_choice: "required", response_format: { type: "json_object" } }, "with response_format", "give one");

finish();
