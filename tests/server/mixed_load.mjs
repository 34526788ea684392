// Mixed load: plain, structured-output (json_schema, guided_regex, guided_choice) and
// forced-tool-call requests, chat and completions, streamed and not, 200 at once. Each
// answer must equal the answer to the same request sent alone (first, one at a time), and
// the constrained ones must hold their constraint (ajv for JSON and tool arguments, RegExp).
import { createRequire } from "node:module";
import path from "node:path";
import { MODEL, check, checkEqual, finish, makeClient } from "./common.mjs";

const require = createRequire(path.join(process.env.NODE_PATH ?? "", "noop.js"));
const Ajv = require("ajv");
const ajv = new Ajv({ strict: false });
const client = makeClient({ timeout: 170_000 });

const schema = {
  type: "object",
  properties: { name: { type: "string", maxLength: 8 }, n: { type: "integer", minimum: 0, maximum: 99 }, ok: { type: "boolean" } },
  required: ["name", "n", "ok"],
  additionalProperties: false,
};
const validJson = ajv.compile(schema);
const tools = [{
  type: "function",
  function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string", maxLength: 10 } }, required: ["q"], additionalProperties: false } },
}];
const validArgs = ajv.compile(tools[0].function.parameters);
const regex = "[a-z]{2,6}-[0-9]{1,3}";
const choices = ["alpha", "beta", "gamma delta"];
const messages = [{ role: "user", content: "Answer briefly." }];

// Request i of the mix: [kind, body].
function request(i) {
  const common = { model: MODEL, temperature: 1, seed: 500 + i };
  switch (i % 6) {
    case 0: return ["chat", { ...common, messages, max_tokens: 24 + (i % 5), ignore_eos: true }];
    case 1: return ["chat", { ...common, messages, max_tokens: 400, response_format: { type: "json_schema", json_schema: { name: "r", schema } } }];
    case 2: return ["chat", { ...common, messages, max_tokens: 400, tools, tool_choice: "required" }];
    case 3: return ["completion", { ...common, prompt: "Code: ", max_tokens: 40, guided_regex: regex }];
    case 4: return ["completion", { ...common, prompt: "Pick: ", max_tokens: 20, guided_choice: choices }];
    default: return ["completion", { ...common, prompt: "Once upon a time", max_tokens: 30, ignore_eos: true }];
  }
}

async function send([kind, body], stream) {
  const api = kind === "chat" ? client.chat.completions : client.completions;
  if (!stream) {
    const r = await api.create(body);
    const c = r.choices[0];
    return kind === "chat"
      ? { text: c.message.content ?? "", calls: (c.message.tool_calls ?? []).map((t) => [t.function.name, t.function.arguments]), finish: c.finish_reason }
      : { text: c.text, calls: [], finish: c.finish_reason };
  }
  const s = await api.create({ ...body, stream: true });
  let text = "", finishReason = null;
  const calls = [];
  for await (const chunk of s) {
    const c = chunk.choices[0];
    if (!c) continue;
    text += kind === "chat" ? c.delta?.content ?? "" : c.text ?? "";
    for (const d of c.delta?.tool_calls ?? []) {
      if (d.id) calls.push([d.function.name, d.function.arguments ?? ""]);
      else if (d.function?.arguments) calls[calls.length - 1][1] += d.function.arguments;
    }
    finishReason = c.finish_reason ?? finishReason;
  }
  return { text, calls, finish: finishReason };
}

const kDistinct = 50, kRepeat = 4;
const mix = Array.from({ length: kDistinct }, (_, i) => request(i));
const alone = [];
for (const req of mix) alone.push(await send(req, false));

// The constraints hold (checked on the requests sent alone; the load must equal them).
for (const [i, a] of alone.entries()) {
  const what = `request ${i}`;
  switch (i % 6) {
    case 1: {
      let v = null;
      try { v = JSON.parse(a.text); } catch (e) { /* checked below */ }
      check(v !== null && validJson(v), `${what}: JSON valid under the schema`, a.text);
      break;
    }
    case 2:
      checkEqual(a.finish, "tool_calls", `${what}: finish_reason`);
      check(a.calls.length >= 1 && a.calls.every(([n, args]) => n === "lookup" && validArgs(JSON.parse(args))), `${what}: valid calls`, a.calls);
      break;
    case 3: check(new RegExp(`^(?:${regex})$`).test(a.text), `${what}: matches the regex`, a.text); break;
    case 4: check(choices.includes(a.text), `${what}: one of the choices`, a.text); break;
    default: checkEqual(a.finish, "length", `${what}: finish_reason`);
  }
}

// 200 at once, every other one streamed.
const jobs = [];
for (let r = 0; r < kRepeat; r++) {
  for (const [i, req] of mix.entries()) jobs.push(send(req, (i + r) % 2 === 0).then((res) => ({ i, r, res })));
}
const results = await Promise.allSettled(jobs);
let ok = 0;
for (const x of results) {
  check(x.status === "fulfilled", "request completed", x.reason?.message);
  if (x.status !== "fulfilled") continue;
  const { i, r, res } = x.value;
  checkEqual(res, alone[i], `request ${i} (copy ${r}) under load = alone`);
  ok++;
}
checkEqual(ok, kDistinct * kRepeat, "every request answered");
finish();
