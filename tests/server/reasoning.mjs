// Reasoning content through the official openai client, against a server with
// --reasoning-parser qwen3. The random test model writes <think> only when told to, so the
// answers are shaped by guided_regex: "<think>" reasoning "</think>" content. Whole and
// streamed answers must split into reasoning_content and content exactly where the tags
// are, with the tags dropped (the parts, tags put back, must match the regex again).
import { MODEL, check, checkEqual, finish, makeClient } from "./common.mjs";

const client = makeClient();
const messages = [{ role: "user", content: "Think, then answer." }];
const regex = "<think>[a-z]{1,8}( [a-z]{1,8}){0,3}</think>[a-z]{1,8}( [a-z]{1,8}){0,3}";

for (let i = 0; i < 8; i++) {
  const body = { model: MODEL, messages, temperature: 1, seed: 900 + i, max_tokens: 120, guided_regex: regex };
  const whole = await client.chat.completions.create(body);
  const m = whole.choices[0].message;
  checkEqual(whole.choices[0].finish_reason, "stop", `request ${i}: finish_reason`);
  const joined = `<think>${m.reasoning_content ?? ""}</think>${m.content ?? ""}`;
  check(new RegExp(`^(?:${regex})$`).test(joined), `request ${i}: reasoning and content rejoin to the constrained text`, m);
  check(!(m.content ?? "").includes("think>") && !(m.reasoning_content ?? "").includes("think>"), `request ${i}: tags dropped`, m);
  check((m.reasoning_content ?? "").length > 0 && (m.content ?? "").length > 0, `request ${i}: both parts present`, m);

  const stream = await client.chat.completions.create({ ...body, stream: true });
  let reasoning = "", content = "";
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? "";
    content += d.content ?? "";
  }
  checkEqual({ reasoning, content }, { reasoning: m.reasoning_content ?? "", content: m.content ?? "" },
             `request ${i}: streamed = whole`);
}
finish();
