// Echo with logprobs (lm-evaluation-harness's loglikelihood requests) and vLLM's
// prompt_logprobs through the official `openai` client. EXPECTED (from the C++ test) holds the
// prompts, their token ids and the offline engine's logprob for each prompt token after the
// first: the prompt part of every answer must give those values.
import { MODEL, OpenAI, check, checkEqual, finish, makeClient } from "./common.mjs";

const client = makeClient();
const expected = JSON.parse(process.env.EXPECTED);
const [prompt, other] = expected.prompts;
const close = (a, b) => typeof a === "number" && Math.abs(a - b) < 1e-3;

// One choice's logprobs object: the prompt's tokens first (prompt number p), then
// `generated` tokens; `text` is the choice's text (the prompt's text, then the completion).
function checkEchoLogprobs(lp, p, generated, text, what) {
  const ids = expected.ids[p], ref = expected.logprobs[p], promptText = expected.prompts[p];
  const n = ids.length;
  for (const key of ["tokens", "token_logprobs", "top_logprobs", "text_offset"]) {
    checkEqual(lp[key].length, n + generated, `${what}: ${key} covers the prompt and the completion`);
  }
  checkEqual(lp.token_logprobs[0], null, `${what}: the first prompt token has no logprob`);
  checkEqual(lp.top_logprobs[0], null, `${what}: nor top_logprobs`);
  checkEqual(lp.tokens.slice(0, n).join(""), promptText, `${what}: the prompt tokens join to the prompt`);
  checkEqual(lp.tokens.join(""), text, `${what}: all tokens join to the text`);
  for (let i = 0; i < n; i++) {
    check(promptText.startsWith(lp.tokens[i], lp.text_offset[i]), `${what}: prompt token ${i} at its text_offset`,
      { token: lp.tokens[i], offset: lp.text_offset[i] });
    if (i === 0) continue;
    check(close(lp.token_logprobs[i], ref[i - 1]), `${what}: prompt token ${i} logprob = offline engine's`,
      { got: lp.token_logprobs[i], expected: ref[i - 1] });
    const top = lp.top_logprobs[i];
    check(top !== null && Object.keys(top).length >= 1 && Object.keys(top).length <= 2,
      `${what}: prompt token ${i} top_logprobs: the most likely token and the prompt's`, top);
    check(top !== null && close(top[lp.tokens[i]], lp.token_logprobs[i]), `${what}: top_logprobs holds the prompt token`, top);
  }
  for (let i = 1; i < n + generated; i++) {
    const v = lp.token_logprobs[i];
    check(Number.isFinite(v) && v <= 0, `${what}: logprob ${i} finite and <= 0`, v);
  }
  checkEqual(lp.text_offset[n], promptText.length, `${what}: the completion's offsets follow the prompt's text`);
}

// --- lm-evaluation-harness's loglikelihood payload, one prompt
const lmEval = { model: MODEL, max_tokens: 1, temperature: 0, logprobs: 1, echo: true, seed: 1234 };
const one = await client.completions.create({ ...lmEval, prompt });
checkEqual(one.choices.length, 1, "lm-eval: one choice");
check(one.choices[0].text.startsWith(prompt), "lm-eval: the text echoes the prompt", one.choices[0].text);
checkEchoLogprobs(one.choices[0].logprobs, 0, 1, one.choices[0].text, "lm-eval");
checkEqual(one.usage.prompt_tokens, expected.ids[0].length, "lm-eval: usage.prompt_tokens");
checkEqual(one.usage.completion_tokens, 1, "lm-eval: usage.completion_tokens");
// The generated token is the greedy one: the most likely of its top_logprobs.
const last = one.choices[0].logprobs;
const n0 = expected.ids[0].length;
check(close(Math.max(...Object.values(last.top_logprobs[n0])), last.token_logprobs[n0]),
  "lm-eval: the generated token is the most likely", last.top_logprobs[n0]);

// --- a batch of prompts: a list of strings, and a list of token-id lists
const batch = await client.completions.create({ ...lmEval, prompt: [prompt, other] });
checkEqual(batch.choices.map((c) => c.index), [0, 1], "batch: choice indices");
batch.choices.forEach((c, p) => checkEchoLogprobs(c.logprobs, p, 1, c.text, `batch prompt ${p}`));
checkEqual(batch.choices[0].logprobs.tokens, one.choices[0].logprobs.tokens, "batch: first choice = alone");
const byIds = await client.completions.create({ ...lmEval, prompt: expected.ids });
byIds.choices.forEach((c, p) => checkEchoLogprobs(c.logprobs, p, 1, c.text, `token-id prompt ${p}`));
checkEqual(byIds.choices.map((c) => c.text), batch.choices.map((c) => c.text), "token-id prompts: text = text prompts'");

// --- n = 2: every choice of a prompt carries the same prompt part
const sampled = await client.completions.create({ ...lmEval, prompt: [prompt, other], n: 2, max_tokens: 3,
  temperature: 1, ignore_eos: true });
checkEqual(sampled.choices.length, 4, "n=2: two choices per prompt");
sampled.choices.forEach((c, i) => checkEchoLogprobs(c.logprobs, Math.floor(i / 2), 3, c.text, `n=2 choice ${i}`));
for (const i of [0, 2]) {
  const a = sampled.choices[i].logprobs, b = sampled.choices[i + 1].logprobs;
  const n = expected.ids[i / 2].length;
  checkEqual(b.token_logprobs.slice(0, n), a.token_logprobs.slice(0, n), `n=2 prompt ${i / 2}: same prompt part`);
}

// --- streamed: the chunks' logprobs join to the whole response's
const streamOf = async (body) => {
  const joined = { text: {}, lp: {} };
  for await (const chunk of await client.completions.create({ ...body, stream: true })) {
    for (const c of chunk.choices) {
      joined.text[c.index] = (joined.text[c.index] ?? "") + c.text;
      const lp = (joined.lp[c.index] ??= { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] });
      for (const key of Object.keys(lp)) lp[key].push(...(c.logprobs?.[key] ?? []));
    }
  }
  return joined;
};
const longer = { ...lmEval, prompt: [prompt, other], max_tokens: 5, ignore_eos: true };
const whole = await client.completions.create(longer);
const streamed = await streamOf(longer);
for (const c of whole.choices) {
  checkEqual(streamed.text[c.index], c.text, `streamed choice ${c.index}: text`);
  // Two requests: the values may differ in the last bits (another batch, another summation order).
  const [s, w] = [streamed.lp[c.index], c.logprobs];
  checkEqual(s.tokens, w.tokens, `streamed choice ${c.index}: logprobs.tokens`);
  checkEqual(s.text_offset, w.text_offset, `streamed choice ${c.index}: logprobs.text_offset`);
  check(s.token_logprobs.every((v, i) => v === w.token_logprobs[i] || close(v, w.token_logprobs[i])),
    `streamed choice ${c.index}: logprobs.token_logprobs`, { streamed: s.token_logprobs, whole: w.token_logprobs });
  check(s.top_logprobs.every((t, i) => (t === null && w.top_logprobs[i] === null) ||
      (t !== null && w.top_logprobs[i] !== null && Object.keys(t).length === Object.keys(w.top_logprobs[i]).length &&
       Object.entries(t).every(([k, v]) => close(v, w.top_logprobs[i][k])))),
    `streamed choice ${c.index}: logprobs.top_logprobs`, { streamed: s.top_logprobs, whole: w.top_logprobs });
  checkEchoLogprobs(streamed.lp[c.index], c.index, 5, streamed.text[c.index], `streamed choice ${c.index}`);
}

// --- vLLM's prompt_logprobs: per choice, null first, then {"<id>": {logprob, rank, decoded_token}}
const withPromptLp = await client.completions.create({ model: MODEL, prompt: [prompt, other], max_tokens: 2,
  temperature: 0, prompt_logprobs: 2 });
withPromptLp.choices.forEach((c, p) => {
  const list = c.prompt_logprobs, ids = expected.ids[p];
  checkEqual(list?.length, ids.length, `prompt_logprobs ${p}: one entry per prompt token`);
  if (!Array.isArray(list)) return;
  checkEqual(list[0], null, `prompt_logprobs ${p}: null first`);
  checkEqual(c.logprobs, null, `prompt_logprobs ${p}: logprobs not asked for`);
  for (let i = 1; i < ids.length; i++) {
    const own = list[i]?.[String(ids[i])];
    check(own !== undefined && close(own.logprob, expected.logprobs[p][i - 1]),
      `prompt_logprobs ${p}, token ${i}: the prompt token's logprob = offline engine's`, list[i]);
    check(own !== undefined && Number.isInteger(own.rank) && own.rank >= 1 && typeof own.decoded_token === "string",
      `prompt_logprobs ${p}, token ${i}: rank and decoded_token`, own);
    const ranks = Object.values(list[i] ?? {}).map((e) => e.rank).sort((a, b) => a - b);
    check(ranks[0] === 1 && ranks[1] === 2 && ranks.length <= 3, `prompt_logprobs ${p}, token ${i}: the top 2 and the token`, list[i]);
  }
  // The same values as echo's token_logprobs.
  const echoed = batch.choices[p].logprobs.token_logprobs;
  check(list.every((e, i) => i === 0 || close(e?.[String(ids[i])]?.logprob, echoed[i])),
    `prompt_logprobs ${p} = echo's token_logprobs`, { list, echoed });
});
const chat = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: prompt }],
  max_completion_tokens: 2, prompt_logprobs: 1 });
checkEqual(chat.prompt_logprobs?.length, chat.usage.prompt_tokens, "chat prompt_logprobs: one per prompt token");
checkEqual(chat.prompt_logprobs?.[0], null, "chat prompt_logprobs: null first");

// --- refusals: prompt_logprobs out of range, or asked of a stream
async function expect400(promise, param, what) {
  try {
    await promise;
    check(false, `${what}: expected HTTP 400`);
  } catch (e) {
    check(e instanceof OpenAI.APIError, `${what}: APIError`, String(e));
    checkEqual(e.status, 400, `${what}: status`);
    checkEqual(e.param, param, `${what}: param`);
  }
}
await expect400(client.completions.create({ model: MODEL, prompt, prompt_logprobs: 21 }), "prompt_logprobs", "prompt_logprobs 21");
await expect400(client.completions.create({ model: MODEL, prompt, prompt_logprobs: 1, stream: true }),
  "prompt_logprobs", "streamed prompt_logprobs");

finish();
