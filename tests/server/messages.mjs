// Anthropic's Messages API (POST /v1/messages) through the official @anthropic-ai/sdk client,
// against a server with --tool-call-parser hermes and an API key (sent as x-api-key). The
// oracle is the chat endpoint through the openai client: a message's text and usage equal
// those of the equivalent chat completion (greedy, same max tokens); streams deliver the same
// text in the documented event order and build the same message; forced tool calls come back
// as tool_use blocks valid under their schemas (ajv) with the chat's arguments; errors come
// in Anthropic's shape.
import { createRequire } from "node:module";
import path from "node:path";
import { MODEL, check, checkEqual, finish, makeClient } from "./common.mjs";

const require = createRequire(path.join(process.env.NODE_PATH ?? "", "noop.js"));
const { Anthropic } = require("@anthropic-ai/sdk");
const Ajv = require("ajv");
const ajv = new Ajv({ strict: false });
const openai = makeClient();
const baseURL = `http://127.0.0.1:${process.env.PORT}`;
const client = new Anthropic({ baseURL, apiKey: process.env.API_KEY, maxRetries: 0, timeout: 120_000 });

async function chatOracle(messages, maxTokens, extra = {}) {
  const c = await openai.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: maxTokens, ...extra });
  return { text: c.choices[0].message.content ?? "", finish: c.choices[0].finish_reason, usage: c.usage, calls: c.choices[0].message.tool_calls ?? [] };
}

const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

function checkAgainstChat(m, oracle, what) {
  checkEqual([m.type, m.role, m.model], ["message", "assistant", MODEL], `${what}: type, role, model`);
  check(m.id.startsWith("msg_"), `${what}: id`, m.id);
  checkEqual(textOf(m), oracle.text, `${what}: text equals the chat completion's`);
  checkEqual(m.stop_reason, oracle.finish === "length" ? "max_tokens" : "end_turn", `${what}: stop_reason`);
  checkEqual(m.stop_sequence, null, `${what}: stop_sequence`);
  checkEqual(m.usage.input_tokens + m.usage.cache_read_input_tokens, oracle.usage.prompt_tokens, `${what}: input tokens`);
  checkEqual(m.usage.output_tokens, oracle.usage.completion_tokens, `${what}: output_tokens`);
}

// --- Plain turns, with a system prompt as a string and as text blocks.
for (const [i, prompt] of ["Tell me a story about a dragon.", "What is 2 + 2?", "Hi"].entries()) {
  const m = await client.messages.create({ model: MODEL, max_tokens: 24, temperature: 0, messages: [{ role: "user", content: prompt }] });
  checkAgainstChat(m, await chatOracle([{ role: "user", content: prompt }], 24), `plain ${i}`);
  check(textOf(m).length > 0, `plain ${i}: non-empty text`);
}
{
  const messages = [{ role: "user", content: [{ type: "text", text: "Name a colour." }, { type: "text", text: "Just one." }] }];
  const oracleMessages = [{ role: "system", content: "You are terse.\nReally." }, { role: "user", content: [{ type: "text", text: "Name a colour." }, { type: "text", text: "Just one." }] }];
  const oracle = await chatOracle(oracleMessages, 16);
  checkAgainstChat(await client.messages.create({ model: MODEL, max_tokens: 16, temperature: 0, system: "You are terse.\nReally.", messages }), oracle, "system string");
  checkAgainstChat(await client.messages.create({ model: MODEL, max_tokens: 16, temperature: 0, system: [{ type: "text", text: "You are terse." }, { type: "text", text: "Really.", cache_control: { type: "ephemeral" } }], messages }), oracle, "system blocks");
}

// --- Streaming: the documented event order, the same text, and the SDK's accumulated message.
{
  const prompt = "Write a short poem about the sea.";
  const request = { model: MODEL, max_tokens: 32, temperature: 0, messages: [{ role: "user", content: prompt }] };
  const whole = await client.messages.create(request);
  const events = [];
  for await (const e of await client.messages.create({ ...request, stream: true })) events.push(e);
  const types = events.map((e) => e.type).filter((t) => t !== "ping");
  checkEqual(types[0], "message_start", "stream: message_start first");
  checkEqual(events[0].message.content, [], "stream: message_start has no content");
  checkEqual(types.slice(-2), ["message_delta", "message_stop"], "stream: message_delta, message_stop last");
  checkEqual(types[1], "content_block_start", "stream: a block opens");
  check(types.slice(2, -3).every((t) => t === "content_block_delta"), "stream: deltas in one block", types);
  checkEqual(types.at(-3), "content_block_stop", "stream: the block closes");
  const text = events.filter((e) => e.type === "content_block_delta").map((e) => e.delta.text).join("");
  checkEqual(text, textOf(whole), "stream: the text of the whole message");
  const delta = events.find((e) => e.type === "message_delta");
  checkEqual([delta.delta.stop_reason, delta.usage.output_tokens], [whole.stop_reason, whole.usage.output_tokens], "stream: stop_reason and usage");
  const built = await client.messages.stream(request).finalMessage();
  checkEqual([built.content, built.stop_reason, built.usage], [whole.content, whole.stop_reason, whole.usage], "stream: the SDK's message equals the whole one");
}

// --- stop_sequences: a string the greedy answer contains ends it there.
{
  const prompt = "Tell me a story about a dragon.";
  const free = await client.messages.create({ model: MODEL, max_tokens: 40, temperature: 0, messages: [{ role: "user", content: prompt }] });
  const text = textOf(free);
  const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
  check(stop.length === 3, "stop: a stop string from the answer", text);
  const m = await client.messages.create({ model: MODEL, max_tokens: 40, temperature: 0, stop_sequences: [stop, "never-seen-zzz"], messages: [{ role: "user", content: prompt }] });
  const oracle = await chatOracle([{ role: "user", content: prompt }], 40, { stop: [stop, "never-seen-zzz"] });
  checkEqual(textOf(m), oracle.text, "stop: text equals the chat completion's");
  checkEqual([m.stop_reason, m.stop_sequence], ["stop_sequence", stop], "stop: stop_reason and the sequence");
  check(!textOf(m).includes(stop), "stop: the sequence is not in the text");
}

// --- Tools: forced calls come back as tool_use blocks with the chat's arguments.
// Enums keep the random-weight model's constrained arguments short.
const weather = { name: "get_weather", description: "Current weather in a city", input_schema: { type: "object", properties: { city: { enum: ["Paris", "Rome", "Oslo"] }, unit: { enum: ["celsius", "fahrenheit"] } }, required: ["city", "unit"], additionalProperties: false } };
const chatWeather = { type: "function", function: { name: weather.name, description: weather.description, parameters: weather.input_schema } };
const validWeather = ajv.compile(weather.input_schema);
for (const [choice, chatChoice] of [[{ type: "tool", name: "get_weather" }, { type: "function", function: { name: "get_weather" } }], [{ type: "any" }, "required"]]) {
  const question = [{ role: "user", content: "What is the weather in Paris?" }];
  const m = await client.messages.create({ model: MODEL, max_tokens: 200, temperature: 0, tools: [weather], tool_choice: choice, messages: question });
  const oracle = await chatOracle(question, 200, { tools: [chatWeather], tool_choice: chatChoice });
  const uses = m.content.filter((b) => b.type === "tool_use");
  check(uses.length >= 1, `tool_choice ${choice.type}: a tool_use block`, m.content);
  checkEqual(m.stop_reason, "tool_use", `tool_choice ${choice.type}: stop_reason`);
  if (uses.length >= 1) {
    check(uses[0].id.startsWith("toolu_"), `tool_choice ${choice.type}: id`, uses[0].id);
    checkEqual(uses[0].name, "get_weather", `tool_choice ${choice.type}: name`);
    check(validWeather(uses[0].input), `tool_choice ${choice.type}: input valid under the schema`, uses[0].input);
    checkEqual(uses[0].input, JSON.parse(oracle.calls[0]?.function.arguments ?? "null"), `tool_choice ${choice.type}: the chat's arguments`);
  }
  // Streamed, the SDK builds the same blocks from input_json_delta.
  const built = await client.messages.stream({ model: MODEL, max_tokens: 200, temperature: 0, tools: [weather], tool_choice: choice, messages: question }).finalMessage();
  checkEqual(built.content.map((b) => b.type === "tool_use" ? [b.name, b.input] : b), m.content.map((b) => b.type === "tool_use" ? [b.name, b.input] : b), `tool_choice ${choice.type}: streamed blocks`);
}

// --- A tool round trip renders as the chat conversation with tool_calls and a tool message.
{
  const messages = [
    { role: "user", content: "What is the weather in Paris?" },
    { role: "assistant", content: [{ type: "text", text: "Let me check." }, { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "Sunny, 21 C" }, { type: "text", text: "Thanks. Summarise it." }] },
  ];
  const m = await client.messages.create({ model: MODEL, max_tokens: 24, temperature: 0, tools: [weather], messages });
  const oracle = await chatOracle([
    { role: "user", content: "What is the weather in Paris?" },
    { role: "assistant", content: "Let me check.", tool_calls: [{ id: "toolu_1", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
    { role: "tool", tool_call_id: "toolu_1", content: "Sunny, 21 C" },
    { role: "user", content: [{ type: "text", text: "Thanks. Summarise it." }] },
  ], 24, { tools: [chatWeather] });
  checkEqual(textOf(m), oracle.text, "tool round trip: text equals the chat completion's");
  checkEqual(m.usage.input_tokens + m.usage.cache_read_input_tokens, oracle.usage.prompt_tokens, "tool round trip: the same prompt");
}

// --- thinking: disabled is the template's enable_thinking false.
{
  const question = [{ role: "user", content: "Is the sky blue?" }];
  const m = await client.messages.create({ model: MODEL, max_tokens: 16, temperature: 0, thinking: { type: "disabled" }, messages: question });
  checkAgainstChat(m, await chatOracle(question, 16, { chat_template_kwargs: { enable_thinking: false } }), "thinking disabled");
}

// --- count_tokens: the prompt the same body would run.
{
  const messages = [{ role: "user", content: "Count me, please." }];
  const counted = await client.messages.countTokens({ model: MODEL, system: "Be brief.", messages });
  const oracle = await chatOracle([{ role: "system", content: "Be brief." }, ...messages], 1);
  checkEqual(counted, { input_tokens: oracle.usage.prompt_tokens }, "count_tokens");
}

// --- Errors in Anthropic's shape; the server keeps serving.
async function expectError(what, status, type, call) {
  try {
    await call();
    check(false, `${what}: accepted`);
  } catch (e) {
    checkEqual([e.status, e.error?.type, e.error?.error?.type], [status, "error", type], what);
    check(typeof e.error?.error?.message === "string" && e.error.error.message.length > 0, `${what}: a message`, e.error);
  }
}
const hi = [{ role: "user", content: "Hi" }];
await expectError("no max_tokens", 400, "invalid_request_error", () => client.messages.create({ model: MODEL, messages: hi }));
await expectError("an image", 400, "invalid_request_error", () => client.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] }));
await expectError("a server tool", 400, "invalid_request_error", () => client.messages.create({ model: MODEL, max_tokens: 4, tools: [{ type: "web_search_20250305", name: "web_search" }], messages: hi }));
await expectError("an unknown field", 400, "invalid_request_error", () => client.messages.create({ model: MODEL, max_tokens: 4, messages: hi, frobnicate: 1 }));
await expectError("a role", 400, "invalid_request_error", () => client.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: "system", content: "x" }] }));
await expectError("another model", 404, "not_found_error", () => client.messages.create({ model: "claude-none", max_tokens: 4, messages: hi }));
await expectError("a wrong key", 401, "authentication_error", () => new Anthropic({ baseURL, apiKey: "wrong", maxRetries: 0 }).messages.create({ model: MODEL, max_tokens: 4, messages: hi }));
checkAgainstChat(await client.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages: hi }), await chatOracle(hi, 8), "after the errors");

finish();
