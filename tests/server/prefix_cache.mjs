// Prefix-cache hits in usage, through the official openai client: the same long prompt sent
// twice (many KV blocks long) is computed the first time (cached_tokens 0) and found in the
// prefix cache the second (cached_tokens > 0, whole blocks, at most the prompt; every full
// block but the one holding the last token, since that token must be computed). On
// /v1/completions and /v1/chat/completions as usage.prompt_tokens_details.cached_tokens
// (non-streamed, the streamed usage chunk, continuous usage stats; summed over a request's
// prompts, once per prompt whatever n), on /v1/responses as
// usage.input_tokens_details.cached_tokens; the hits agree with /metrics'
// kestrel:prefix_cache_hits_total. BLOCK_SIZE is the server's --block-size; with
// CACHING=0 (a server with --no-prefix-caching) every count is 0.
import { MODEL, baseURL, check, checkEqual, collect, finish, makeClient } from "./common.mjs";

const client = makeClient();
const BLOCK = Number(process.env.BLOCK_SIZE);
const caching = process.env.CACHING !== "0";

// About 300 tokens, starting with `tag` so that prompts of different tags share no block.
const longText = (tag) => `${tag}. ` +
  Array.from({ length: 30 }, (_, i) => `Sentence ${i} says that ${i} times seven is ${i * 7}.`).join(" ");

const cachedOf = (usage) => usage?.prompt_tokens_details?.cached_tokens;

function checkFirst(usage, what) {
  checkEqual(cachedOf(usage), 0, `${what}: first request, cached_tokens 0`);
}
// A second request for a prompt of `promptTokens` tokens whose blocks are all cached.
function checkSecond(cached, promptTokens, what) {
  check(promptTokens > 4 * BLOCK, `${what}: the prompt spans several blocks`, { promptTokens, BLOCK });
  if (!caching) {
    checkEqual(cached, 0, `${what}: no prefix caching, cached_tokens 0`);
    return;
  }
  check(Number.isInteger(cached) && cached > 0, `${what}: cached_tokens > 0`, cached);
  checkEqual(cached % BLOCK, 0, `${what}: cached_tokens is whole blocks`);
  check(cached <= promptTokens, `${what}: cached_tokens <= prompt_tokens`, { cached, promptTokens });
  checkEqual(cached, Math.floor((promptTokens - 1) / BLOCK) * BLOCK, `${what}: every full block but the last token's`);
}

async function prefixHits() {
  const text = await (await fetch(baseURL.replace(/\/v1$/, "/metrics"))).text();
  const line = text.split("\n").find((l) => l.startsWith("kestrel:prefix_cache_hits_total{"));
  return Number(line.split(" ").at(-1));
}

// --- completions, not streamed; the second hit counted in /metrics as usage reports it
const cBase = { model: MODEL, prompt: longText("Completions"), max_tokens: 4, temperature: 0, ignore_eos: true };
const c1 = await client.completions.create(cBase);
checkFirst(c1.usage, "completions");
const hitsBefore = await prefixHits();
const c2 = await client.completions.create(cBase);
const hitsAfter = await prefixHits();
checkSecond(cachedOf(c2.usage), c2.usage.prompt_tokens, "completions");
checkEqual(hitsAfter - hitsBefore, cachedOf(c2.usage), "completions: /metrics counted the hits usage reports");
checkEqual(c2.usage.prompt_tokens, c1.usage.prompt_tokens, "completions: same prompt_tokens");
checkEqual(c2.choices[0].text, c1.choices[0].text, "completions: a cached prompt gives the same greedy text");

// Streamed: the usage chunk, and continuous usage stats (never decreasing, the last = final).
const s = await collect(await client.completions.create({ ...cBase, stream: true, stream_options: { include_usage: true } }), false);
checkEqual(s.usage, c2.usage, "completions streamed: usage chunk = the cached non-streamed usage");
const chunks = [];
for await (const chunk of await client.completions.create({
  ...cBase, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } })) chunks.push(chunk);
const usages = chunks.map((c) => c.usage);
check(usages.every((u) => u && Number.isInteger(cachedOf(u))), "continuous usage: prompt_tokens_details in every chunk", usages);
for (let i = 1; i < usages.length; i++) {
  check(cachedOf(usages[i]) >= cachedOf(usages[i - 1]), "continuous usage: cached_tokens never decreases", usages.slice(i - 1, i + 1));
}
checkEqual(usages.at(-1), c2.usage, "continuous usage: the usage chunk = the cached usage");
checkEqual(usages.at(-2), usages.at(-1), "continuous usage: the last choice chunk's usage = the usage chunk's");

// Several prompts: summed over the prompts; n = 2 counts a prompt once.
const fresh = longText("Another prompt");
const two = await client.completions.create({ ...cBase, prompt: [cBase.prompt, fresh] });
checkEqual(cachedOf(two.usage), cachedOf(c2.usage), "two prompts (one cached, one new): the cached one's count");
const twoAgain = await client.completions.create({ ...cBase, prompt: [cBase.prompt, fresh] });
checkSecond(cachedOf(twoAgain.usage) - cachedOf(c2.usage), twoAgain.usage.prompt_tokens - c2.usage.prompt_tokens,
  "two prompts, both cached: the second prompt's part");
const n2 = await client.completions.create({ ...cBase, n: 2, temperature: 1, seed: 3 });
checkEqual(cachedOf(n2.usage), cachedOf(c2.usage), "n = 2: the prompt counted once");

// --- chat, not streamed and streamed
const cBody = { model: MODEL, messages: [{ role: "user", content: longText("Chat") }], max_completion_tokens: 4,
  temperature: 0, ignore_eos: true };
const h1 = await client.chat.completions.create(cBody);
checkFirst(h1.usage, "chat");
const h2 = await client.chat.completions.create(cBody);
checkSecond(cachedOf(h2.usage), h2.usage.prompt_tokens, "chat");
const hs = await collect(await client.chat.completions.create({ ...cBody, stream: true, stream_options: { include_usage: true } }), true);
checkEqual(hs.usage, h2.usage, "chat streamed: usage chunk = the cached non-streamed usage");

// A first request that is streamed reports 0 in its usage chunk.
const sf = await collect(await client.completions.create({
  ...cBase, prompt: longText("Streamed first"), stream: true, stream_options: { include_usage: true } }), false);
checkFirst(sf.usage, "completions streamed first");

// --- /v1/responses: input_tokens_details.cached_tokens, not streamed and streamed
const rBody = { model: MODEL, input: longText("Responses"), max_output_tokens: 4, temperature: 0 };
const r1 = await client.responses.create(rBody);
checkEqual(r1.usage.input_tokens_details?.cached_tokens, 0, "responses: first request, cached_tokens 0");
const r2 = await client.responses.create(rBody);
checkSecond(r2.usage.input_tokens_details?.cached_tokens, r2.usage.input_tokens, "responses");
let completed = null;
for await (const e of await client.responses.create({ ...rBody, stream: true })) {
  if (e.type === "response.completed" || e.type === "response.incomplete") completed = e.response;
}
checkEqual(completed?.usage, r2.usage, "responses streamed: the final event's usage = the cached usage");

finish();
