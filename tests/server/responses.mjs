// The Responses API (POST /v1/responses) through the official openai client, against a
// server with --tool-call-parser hermes. The oracle is the chat endpoint: a response's text
// and usage equal those of the equivalent chat completion (greedy, same max tokens); streams
// deliver the same text in the documented event order; tool round trips render and forced
// calls come back as function_call items valid under their schemas (ajv); background
// responses poll to the foreground's text and cancel.
import { createRequire } from "node:module";
import path from "node:path";
import { MODEL, check, checkEqual, finish, makeClient, OpenAI } from "./common.mjs";

const require = createRequire(path.join(process.env.NODE_PATH ?? "", "noop.js"));
const Ajv = require("ajv");
const ajv = new Ajv({ strict: false });
const client = makeClient();

// The response's status for the chat completion's finish_reason.
const statusFor = (finishReason) => (finishReason === "length" ? "incomplete" : "completed");

async function chatOracle(messages, maxTokens, extra = {}) {
  const c = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: maxTokens, ...extra });
  return { text: c.choices[0].message.content ?? "", finish: c.choices[0].finish_reason, usage: c.usage };
}

function checkAgainstChat(r, oracle, what) {
  checkEqual(r.object, "response", `${what}: object`);
  check(r.id.startsWith("resp_"), `${what}: id`, r.id);
  checkEqual(r.output_text, oracle.text, `${what}: text equals the chat completion's`);
  checkEqual(r.status, statusFor(oracle.finish), `${what}: status`);
  if (oracle.finish === "length") checkEqual(r.incomplete_details, { reason: "max_output_tokens" }, `${what}: details`);
  checkEqual(r.usage.input_tokens, oracle.usage.prompt_tokens, `${what}: input_tokens`);
  checkEqual(r.usage.output_tokens, oracle.usage.completion_tokens, `${what}: output_tokens`);
  checkEqual(r.usage.total_tokens, oracle.usage.total_tokens, `${what}: total_tokens`);
  checkEqual(r.error, null, `${what}: error`);
  const message = r.output.find((o) => o.type === "message");
  check(message && message.role === "assistant" && message.id.startsWith("msg_"), `${what}: message item`, r.output);
}

// --- A string input, against the chat completion of the same single user message.
for (const [i, prompt] of ["Tell me a story about a dragon.", "What is 2 + 2?", "Hi"].entries()) {
  const r = await client.responses.create({ model: MODEL, input: prompt, temperature: 0, max_output_tokens: 24 });
  const oracle = await chatOracle([{ role: "user", content: prompt }], 24);
  checkAgainstChat(r, oracle, `string input ${i}`);
  check(r.output_text.length > 0, `string input ${i}: non-empty text`);
  checkEqual(r.max_output_tokens, 24, `string input ${i}: max_output_tokens repeated`);
  checkEqual(r.temperature, 0, `string input ${i}: temperature repeated`);
}

// --- A structured output ends where its schema does: status "completed" with EOS.
const schema = { type: "object", properties: { answer: { enum: ["yes", "no", "maybe"] } }, required: ["answer"], additionalProperties: false };
{
  const r = await client.responses.create({
    model: MODEL, input: "Is the sky blue?", temperature: 0, max_output_tokens: 64,
    text: { format: { type: "json_schema", name: "answer", schema, strict: true } },
  });
  const oracle = await chatOracle([{ role: "user", content: "Is the sky blue?" }], 64, {
    response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } },
  });
  checkAgainstChat(r, oracle, "json_schema");
  checkEqual(r.status, "completed", "json_schema: completed");
  check(ajv.validate(schema, JSON.parse(r.output_text)), "json_schema: valid", r.output_text);
  checkEqual(r.text.format.type, "json_schema", "json_schema: text repeated");
}

// --- instructions and a list input: a system message first, then the items as messages.
const conversation = [
  { role: "user", content: "Hello" },
  { type: "message", role: "assistant", content: [{ type: "output_text", text: "Hi! How can I help?", annotations: [] }] },
  { role: "user", content: [{ type: "input_text", text: "Name a colour." }] },
];
{
  const r = await client.responses.create({ model: MODEL, instructions: "Answer in one word.", input: conversation, temperature: 0, max_output_tokens: 20 });
  const oracle = await chatOracle([
    { role: "system", content: "Answer in one word." },
    { role: "user", content: "Hello" },
    { role: "assistant", content: "Hi! How can I help?" },
    { role: "user", content: "Name a colour." },
  ], 20);
  checkAgainstChat(r, oracle, "instructions + list");
  checkEqual(r.instructions, "Answer in one word.", "instructions repeated");
}

// --- Streaming: the same text as unstreamed, events in the documented order.
const streamed = { model: MODEL, input: "Write a haiku about the sea.", temperature: 0, max_output_tokens: 30 };
{
  const whole = await client.responses.create(streamed);
  const events = [];
  for await (const e of await client.responses.create({ ...streamed, stream: true })) events.push(e);
  const types = events.map((e) => e.type);
  const expected = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
  checkEqual(types.slice(0, 4), expected, "stream: opening events");
  const deltas = events.filter((e) => e.type === "response.output_text.delta");
  check(deltas.length > 1, "stream: several deltas", deltas.length);
  const firstAfter = types.findIndex((t, i) => i >= 4 && t !== "response.output_text.delta");
  checkEqual(types.slice(4, firstAfter).every((t) => t === "response.output_text.delta"), true, "stream: deltas follow the part");
  checkEqual(types.slice(firstAfter), ["response.output_text.done", "response.content_part.done", "response.output_item.done",
    whole.status === "completed" ? "response.completed" : "response.incomplete"], "stream: closing events");
  checkEqual(events.map((e) => e.sequence_number), events.map((_, i) => i), "stream: sequence numbers 0, 1, ...");
  checkEqual(deltas.map((d) => d.delta).join(""), whole.output_text, "stream: deltas equal the unstreamed text");
  const itemId = events[2].item.id;
  check(deltas.every((d) => d.item_id === itemId && d.output_index === 0 && d.content_index === 0), "stream: delta ids", deltas[0]);
  const last = events.at(-1).response;
  checkEqual(last.status, whole.status, "stream: final status");
  checkEqual(last.output[0].content, whole.output[0].content, "stream: final content");
  // The same prompt again may find its blocks cached: all counts but cached_tokens agree.
  checkEqual({ ...last.usage, input_tokens_details: undefined }, { ...whole.usage, input_tokens_details: undefined },
    "stream: usage");
  checkEqual(events[0].response.status, "in_progress", "stream: created in progress");

  // The client's stream helper accumulates the same response.
  const helper = client.responses.stream(streamed);
  let helperText = "";
  helper.on("response.output_text.delta", (e) => { helperText += e.delta; });
  const final = await helper.finalResponse();
  checkEqual(final.output_text, whole.output_text, "stream(): final output_text");
  checkEqual(helperText, whole.output_text, "stream(): deltas");
}

// --- Tools: a round trip (a call and its output in the input) renders and answers; forced
// calls come back as function_call items.
const tools = [
  {
    type: "function", name: "get_weather", description: "Current weather in a city", strict: true,
    parameters: { type: "object", properties: { city: { type: "string", minLength: 1, maxLength: 12 }, unit: { enum: ["celsius", "fahrenheit"] } }, required: ["city", "unit"], additionalProperties: false },
  },
  {
    type: "function", name: "get_time",
    parameters: { type: "object", properties: { zone: { type: "string", maxLength: 8 } }, required: ["zone"], additionalProperties: false },
  },
];
const validators = Object.fromEntries(tools.map((t) => [t.name, ajv.compile(t.parameters)]));
const roundTrip = [
  { role: "user", content: "What is the weather in Paris?" },
  { type: "function_call", call_id: "call_abc", name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' },
  { type: "function_call_output", call_id: "call_abc", output: '{"temperature": 21}' },
];

function checkCalls(r, what, only) {
  checkEqual(r.status, "completed", `${what}: status`);
  const calls = r.output.filter((o) => o.type === "function_call");
  check(calls.length >= 1, `${what}: calls`, r.output);
  if (only) checkEqual(calls.length, 1, `${what}: one call`);
  for (const c of calls) {
    check(c.id.startsWith("fc_") && c.call_id.startsWith("call_"), `${what}: ids`, c);
    checkEqual(c.status, "completed", `${what}: call status`);
    if (only) checkEqual(c.name, only, `${what}: the named function`);
    const validate = validators[c.name];
    check(validate !== undefined, `${what}: a listed tool`, c.name);
    if (validate) check(validate(JSON.parse(c.arguments)), `${what}: arguments valid`, c.arguments);
  }
  return calls;
}

{
  const r = await client.responses.create({ model: MODEL, input: roundTrip, tools, temperature: 0, max_output_tokens: 16 });
  const oracle = await chatOracle([
    roundTrip[0],
    { role: "assistant", content: "", tool_calls: [{ id: "call_abc", type: "function", function: { name: "get_weather", arguments: roundTrip[1].arguments } }] },
    { role: "tool", tool_call_id: "call_abc", content: roundTrip[2].output },
  ], 16, { tools: tools.map(({ type, ...fn }) => ({ type, function: fn })) });
  checkEqual(r.output_text, oracle.text, "round trip: text equals the chat completion's");
  checkEqual(r.usage.input_tokens, oracle.usage.prompt_tokens, "round trip: the same prompt");
  checkEqual(r.tools.map((t) => t.name), ["get_weather", "get_time"], "round trip: tools repeated");

  // Greedy "required" may write calls until its limit: sampled, as the chat tests do.
  for (const seed of [1, 2, 3]) {
    checkCalls(await client.responses.create({ model: MODEL, input: roundTrip, tools, tool_choice: "required", temperature: 1, seed, max_output_tokens: 600 }), `required ${seed}`);
  }
  const forced = { model: MODEL, input: roundTrip, tools, tool_choice: "required", parallel_tool_calls: false, temperature: 0, max_output_tokens: 400 };
  const required = await client.responses.create(forced);
  const calls = checkCalls(required, "required, one call", undefined);
  const named = await client.responses.create({ model: MODEL, input: "Time in Tokyo?", tools, tool_choice: { type: "function", name: "get_time" }, temperature: 0, max_output_tokens: 400 });
  checkCalls(named, "named", "get_time");
  checkEqual(calls.length, 1, "parallel_tool_calls false: one call");

  // Streamed forced calls equal the unstreamed ones.
  const events = [];
  for await (const e of await client.responses.create({ ...forced, stream: true })) events.push(e);
  const done = events.filter((e) => e.type === "response.function_call_arguments.done");
  checkEqual(done.map((e) => [e.name, e.arguments]), calls.map((c) => [c.name, c.arguments]), "stream: the same calls");
  checkEqual(events.at(-1).type, "response.completed", "stream: completed");

  // The client's own output items go back as the next input, with the calls' results.
  const next = await client.responses.create({
    model: MODEL, tools, temperature: 0, max_output_tokens: 16,
    input: [...roundTrip, ...required.output, ...calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: "ok" }))],
  });
  check(next.status === "completed" || next.status === "incomplete", "second round: answered", next.status);
}

// --- Stored responses: previous_response_id continues a conversation as if its turns were
// sent again, and an item_reference stands for the stored item (the oracle: the chat
// completion of the whole conversation); a stored response can be read back, its input items
// listed, and deleted; store: false keeps nothing.
{
  const first = await client.responses.create({ model: MODEL, input: "Name a color.", temperature: 0, max_output_tokens: 12 });
  checkEqual(first.store, true, "stored: store defaults to true");
  const second = await client.responses.create({
    model: MODEL, previous_response_id: first.id, input: "And another one?", temperature: 0, max_output_tokens: 12,
  });
  checkEqual(second.previous_response_id, first.id, "stored: previous_response_id repeated");
  const turns = [
    { role: "user", content: "Name a color." },
    { role: "assistant", content: first.output_text },
    { role: "user", content: "And another one?" },
  ];
  const oracle = await chatOracle(turns, 12);
  checkAgainstChat(second, oracle, "stored: second turn");
  // Instructions are the request's own: the third turn's apply, the first's are not kept.
  const third = await client.responses.create({
    model: MODEL, previous_response_id: second.id, instructions: "Answer in one word.", input: "One more?", temperature: 0, max_output_tokens: 12,
  });
  const oracle3 = await chatOracle([
    { role: "system", content: "Answer in one word." },
    ...turns,
    { role: "assistant", content: second.output_text },
    { role: "user", content: "One more?" },
  ], 12);
  checkAgainstChat(third, oracle3, "stored: third turn");
  // An item_reference stands for the stored item it names (Codex-style clients send the
  // conversation with references to the server's own output items).
  const referenced = await client.responses.create({
    model: MODEL, temperature: 0, max_output_tokens: 12,
    input: [{ role: "user", content: "Name a color." }, { type: "item_reference", id: first.output.at(-1).id }, { role: "user", content: "And another one?" }],
  });
  checkAgainstChat(referenced, oracle, "stored: item_reference");
  // input_items: the conversation a stored response answered (the chain's turns, then its
  // own input), newest first unless asked; the client pages on, sending the last id as
  // `after`. Every item has an id, and an input item's id can be referenced as an output's.
  const listed = [];
  for await (const item of client.responses.inputItems.list(third.id, { limit: 2, order: "asc" })) listed.push(item);
  checkEqual(listed.map((i) => [i.type, i.role, i.content.map((p) => p.text).join("")]), [
    ["message", "user", "Name a color."],
    ["message", "assistant", first.output_text],
    ["message", "user", "And another one?"],
    ["message", "assistant", second.output_text],
    ["message", "user", "One more?"],
  ], "input_items: the conversation, two at a time");
  checkEqual(listed[1].id, first.output.at(-1).id, "input_items: an output item keeps its id");
  check(listed.every((i) => typeof i.id === "string") && new Set(listed.map((i) => i.id)).size === 5,
        "input_items: every item has its own id", listed.map((i) => i.id));
  const newest = await client.responses.inputItems.list(third.id);
  checkEqual(newest.data.map((i) => i.id), listed.map((i) => i.id).reverse(), "input_items: newest first by default");
  checkEqual([newest.body.first_id, newest.body.last_id, newest.body.has_more], [listed[4].id, listed[0].id, false],
             "input_items: first_id, last_id, has_more");
  const byInputIds = await client.responses.create({
    model: MODEL, temperature: 0, max_output_tokens: 12,
    input: [{ type: "item_reference", id: listed[0].id }, { type: "item_reference", id: listed[1].id },
            { type: "item_reference", id: listed[2].id }],
  });
  checkAgainstChat(byInputIds, oracle, "stored: item_reference to input items");
  try {
    await client.responses.inputItems.list(third.id, { limit: 0 });
    check(false, "input_items limit 0: accepted");
  } catch (e) {
    checkEqual([e.status, e.param], [400, "limit"], "input_items limit 0: a 400 naming limit");
  }
  // A streamed response is stored too, before its last event reaches the client.
  const stream = await client.responses.create({ model: MODEL, input: "Count to three.", temperature: 0, max_output_tokens: 12, stream: true });
  let streamedId = null;
  for await (const e of stream) if (e.type === "response.completed" || e.type === "response.incomplete") streamedId = e.response.id;
  const streamed = await client.responses.retrieve(streamedId);
  checkEqual(streamed.id, streamedId, "stored: streamed response retrieved");
  const retrieved = await client.responses.retrieve(first.id);
  checkEqual(retrieved.output_text, first.output_text, "stored: retrieved text");
  checkEqual(retrieved.usage, first.usage, "stored: retrieved usage");
  const deleted = await client.responses.delete(first.id);  // the client returns the JSON body
  checkEqual(deleted, { id: first.id, object: "response.deleted", deleted: true }, "stored: deleted");
  const expect404 = async (call, what) => {
    try {
      await call();
      check(false, `${what}: accepted`);
    } catch (e) {
      checkEqual(e.status, 404, `${what}: status`);
    }
  };
  await expect404(() => client.responses.retrieve(first.id), "stored: retrieve after delete");
  await expect404(() => client.responses.delete(first.id), "stored: delete after delete");
  await expect404(() => client.responses.inputItems.list(first.id), "stored: input_items after delete");
  const unstored = await client.responses.create({ model: MODEL, input: "Hi", store: false, max_output_tokens: 4 });
  checkEqual(unstored.store, false, "store false: repeated");
  await expect404(() => client.responses.retrieve(unstored.id), "store false: retrieve");
}

// --- Logprobs (include "message.output_text.logprobs", top_logprobs): the chat completion's
// logprobs of the same conversation, entry for entry; a stream's deltas carry the same.
{
  const params = {
    model: MODEL, input: "Name three fruits.", temperature: 0, max_output_tokens: 10,
    include: ["message.output_text.logprobs"], top_logprobs: 2,
  };
  const r = await client.responses.create(params);
  const chat = await client.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: "Name three fruits." }], temperature: 0, max_tokens: 10,
    logprobs: true, top_logprobs: 2,
  });
  const part = r.output.find((o) => o.type === "message").content[0];
  checkEqual(part.text, chat.choices[0].message.content, "logprobs: text");
  checkEqual(part.logprobs, chat.choices[0].logprobs.content, "logprobs: the chat completion's entries");
  check(part.logprobs.length > 0 && part.logprobs.every((l) => l.top_logprobs.length === 2), "logprobs: two alternatives each", part.logprobs);
  checkEqual(r.top_logprobs, 2, "logprobs: top_logprobs repeated");
  const events = [];
  for await (const e of await client.responses.create({ ...params, stream: true })) events.push(e);
  checkEqual(events.filter((e) => e.type === "response.output_text.delta").flatMap((e) => e.logprobs), part.logprobs,
             "logprobs: the stream's deltas together");
  checkEqual(events.find((e) => e.type === "response.output_text.done").logprobs, part.logprobs, "logprobs: the done event");
  const plain = await client.responses.create({ model: MODEL, input: "Hi", temperature: 0, max_output_tokens: 4 });
  check(!("logprobs" in plain.output.find((o) => o.type === "message").content[0]), "logprobs: none unless asked");
}

// --- Background responses: answered at once "queued", then polled (retrieve) until they end
// with what the same request gives in the foreground; cancelled while they run; continuing
// from one that has not ended is a 400.
{
  const poll = async (id) => {
    for (let i = 0; i < 1200; ++i) {
      const r = await client.responses.retrieve(id);
      if (r.status !== "queued" && r.status !== "in_progress") return r;
      await new Promise((done) => setTimeout(done, 25));
    }
    return client.responses.retrieve(id);
  };
  const prompt = "Tell me a story about a dragon.";
  const queued = await client.responses.create({ model: MODEL, input: prompt, temperature: 0, max_output_tokens: 24, background: true });
  checkEqual(queued.status, "queued", "background: answered queued");
  checkEqual([queued.background, queued.output], [true, []], "background: repeated, no output yet");
  const ended = await poll(queued.id);
  checkAgainstChat(ended, await chatOracle([{ role: "user", content: prompt }], 24), "background: polled to its end");
  checkEqual(ended.background, true, "background: still repeated");
  const again = await client.responses.cancel(queued.id);
  // (The client adds output_text to what create and retrieve return, not to cancel's.)
  checkEqual([again.status, again.output, again.usage], [ended.status, ended.output, ended.usage],
             "background: cancel after its end changes nothing");
  // A long one (3,000 tokens of a random model), cancelled at once.
  const long = await client.responses.create({ model: MODEL, input: "Write a very long story.", temperature: 0, max_output_tokens: 3000, background: true });
  try {
    await client.responses.create({ model: MODEL, input: "And then?", previous_response_id: long.id, max_output_tokens: 4 });
    check(false, "background: continuing from one still running was accepted");
  } catch (e) {
    checkEqual([e.status, e.param], [400, "previous_response_id"], "background: continuing from one still running");
  }
  const cancelled = await client.responses.cancel(long.id);
  checkEqual(cancelled.status, "cancelled", "background: cancelled");
  check(cancelled.usage.output_tokens < 3000, "background: cancelled before its end", cancelled.usage);
  checkEqual((await client.responses.retrieve(long.id)).status, "cancelled", "background: stored cancelled");
  checkEqual((await client.responses.cancel(long.id)).status, "cancelled", "background: cancelled twice");
  // Deleting one that runs stops it first.
  const deleting = await client.responses.create({ model: MODEL, input: "Write another long story.", max_output_tokens: 3000, background: true });
  checkEqual(await client.responses.delete(deleting.id), { id: deleting.id, object: "response.deleted", deleted: true }, "background: deleted while running");
  try {
    await client.responses.retrieve(deleting.id);
    check(false, "background: retrieved after delete");
  } catch (e) {
    checkEqual(e.status, 404, "background: 404 after delete");
  }
  // Streamed: response.created and response.queued ("queued"), response.in_progress, then the
  // foreground stream's events; its deltas make the text polled above.
  const events = [];
  for await (const e of await client.responses.create({ model: MODEL, input: prompt, temperature: 0, max_output_tokens: 24, background: true, stream: true })) events.push(e);
  checkEqual(events.slice(0, 3).map((e) => [e.type, e.response.status]),
             [["response.created", "queued"], ["response.queued", "queued"], ["response.in_progress", "in_progress"]],
             "background stream: its first events");
  checkEqual(events.map((e) => e.sequence_number), events.map((_, i) => i), "background stream: numbered in order");
  checkEqual(events.at(-1).type, ended.status === "completed" ? "response.completed" : "response.incomplete", "background stream: its last event");
  const deltas = (list) => list.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
  checkEqual(deltas(events), ended.output_text, "background stream: the polled text");
  // A client that drops its stream resumes it by GET from the last event it saw; the
  // response ran on meanwhile. Cancelled while resumed, the stream ends.
  const first = [];
  for await (const e of await client.responses.create({ model: MODEL, input: "Write a very long story.", temperature: 0, max_output_tokens: 3000, background: true, stream: true })) {
    first.push(e);
    if (e.sequence_number >= 6) break;  // closes the connection
  }
  const streamId = first[0].response.id;
  const seen = first.at(-1).sequence_number;
  const rest = [];
  for await (const e of await client.responses.retrieve(streamId, { stream: true, starting_after: seen })) {
    rest.push(e);
    if (rest.length === 3) checkEqual((await client.responses.cancel(streamId)).status, "cancelled", "background stream: cancelled while resumed");
  }
  checkEqual(rest.map((e) => e.sequence_number), rest.map((_, i) => seen + 1 + i), "background stream: resumed after the last event seen");
  const stopped = await client.responses.retrieve(streamId);
  checkEqual(stopped.status, "cancelled", "background stream: stored cancelled");
  checkEqual(deltas([...first, ...rest]), stopped.output_text, "background stream: both parts make the stored text");
  try {
    await client.responses.retrieve(streamId, { stream: true });
    check(false, "background stream: resumed after its end");
  } catch (e) {
    checkEqual([e.status, e.param], [400, "stream"], "background stream: nothing to resume once ended");
  }
  const foreground = await client.responses.create({ model: MODEL, input: "Hi", max_output_tokens: 4 });
  try {
    await client.responses.cancel(foreground.id);
    check(false, "background: cancelled a foreground response");
  } catch (e) {
    checkEqual([e.status, e.param], [400, "response_id"], "background: only background responses cancel");
  }
}

// --- Errors reach the client as APIErrors naming the field.
async function expectError(params, param, what) {
  try {
    await client.responses.create({ model: MODEL, input: "x", ...params });
    check(false, `${what}: accepted`);
  } catch (e) {
    check(e instanceof OpenAI.APIError, `${what}: APIError`, String(e));
    checkEqual(e.status, 400, `${what}: status`);
    checkEqual(e.param, param, `${what}: param`);
  }
}
await expectError({ previous_response_id: "resp_123" }, "previous_response_id", "unknown previous_response_id");
await expectError({ tools: [{ type: "web_search" }] }, "tools", "built-in tool");
await expectError({ max_output_tokens: 100000 }, "max_output_tokens", "past the context");
await expectError({ tool_choice: { type: "function", name: "nope" }, tools }, "tool_choice", "unknown function");

finish();
