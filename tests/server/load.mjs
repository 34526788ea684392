// Load: every request of WORKLOAD (a JSON file written by load_test.cc) is sent REPEAT
// times, all at once, as streaming completions. Each stream must end with its own expected
// text (computed by the test from single-request runs of the engine), finish_reason
// "length", and usage that matches its prompt and max_tokens. Prints "SENT <json>" with
// the totals for the test to compare with /metrics.
import fs from "node:fs";
import { MODEL, check, checkEqual, finish, makeClient } from "./common.mjs";

const workload = JSON.parse(fs.readFileSync(process.env.WORKLOAD, "utf8"));
const repeat = Number(process.env.REPEAT ?? "1");
const client = makeClient({ timeout: 170_000 });

async function one(req) {
  const stream = await client.completions.create({
    model: MODEL, prompt: req.prompt, max_tokens: req.max_tokens, temperature: req.temperature,
    seed: req.seed, ignore_eos: true, stream: true, stream_options: { include_usage: true },
  });
  let text = "", finishReason = null, usage = null, ids = new Set();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finishReason = c.finish_reason;
    }
  }
  return { text, finishReason, usage, ids };
}

const jobs = [];
for (let r = 0; r < repeat; r++) {
  for (const req of workload) jobs.push(one(req).then((res) => ({ req, res })));
}
const results = await Promise.allSettled(jobs);
let promptTokens = 0, completionTokens = 0, ok = 0;
const ids = new Set();
for (const r of results) {
  check(r.status === "fulfilled", "request completed", r.reason?.message);
  if (r.status !== "fulfilled") continue;
  const { req, res } = r.value;
  const what = `request ${req.index} (max_tokens ${req.max_tokens}, temperature ${req.temperature})`;
  checkEqual(res.text, req.expected, `${what}: streamed text = single-request run`);
  checkEqual(res.finishReason, "length", `${what}: finish_reason`);
  checkEqual(res.usage?.prompt_tokens, req.prompt_tokens, `${what}: usage.prompt_tokens`);
  checkEqual(res.usage?.completion_tokens, req.max_tokens, `${what}: usage.completion_tokens`);
  checkEqual(res.ids.size, 1, `${what}: one id per stream`);
  for (const id of res.ids) ids.add(id);
  promptTokens += req.prompt_tokens;
  completionTokens += req.max_tokens;
  ok++;
}
checkEqual(ids.size, jobs.length, "every stream has its own id");
console.log("SENT " + JSON.stringify({ requests: ok, prompt_tokens: promptTokens, completion_tokens: completionTokens }));
finish();
