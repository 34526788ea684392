// Structured outputs through the official openai client: 100 chat requests at temperature 1
// with response_format json_schema must all parse and validate under the schema (ajv, an
// independent validator); json_object, guided_json on completions, guided_regex (checked
// with JavaScript's RegExp), guided_grammar, guided_choice, structured_outputs, streaming,
// and the 400s.
import { createRequire } from "node:module";
import path from "node:path";
import { MODEL, check, checkEqual, collect, finish, makeClient, OpenAI } from "./common.mjs";

const require = createRequire(path.join(process.env.NODE_PATH ?? "", "noop.js"));
const Ajv = require("ajv");
const ajv = new Ajv({ strict: false, allErrors: true });
const client = makeClient();
const messages = [{ role: "user", content: "Describe a person as JSON." }];

// Bounded strings and arrays: a random model ends only where the schema leaves nothing else.
const schema = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 150 },
    height: { type: "number" },
    member: { type: "boolean" },
    role: { enum: ["admin", "user", "guest", "ünïcødé 🚀"] },
    tags: { type: "array", items: { type: "string", maxLength: 6 }, maxItems: 3 },
    address: {
      type: "object",
      properties: { city: { type: "string", maxLength: 10 }, zip: { type: "string", pattern: "^[0-9]{5}$" } },
      required: ["zip"],
      additionalProperties: false,
    },
    nickname: { anyOf: [{ type: "string", maxLength: 5 }, { type: "null" }] },
  },
  required: ["name", "age", "role", "tags"],
  additionalProperties: false,
};
const validate = ajv.compile(schema);

function checkValid(text, what) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    check(false, `${what}: parses as JSON`, text);
    return null;
  }
  check(validate(value), `${what}: valid under the schema`, { text, errors: validate.errors });
  return value;
}

// --- 100 sampled requests at temperature 1, all at once.
const format = { type: "json_schema", json_schema: { name: "person", schema, strict: true } };
const replies = await Promise.all(
  Array.from({ length: 100 }, (_, i) =>
    client.chat.completions.create({ model: MODEL, messages, temperature: 1, seed: 1000 + i, max_tokens: 1500, response_format: format })));
let valid = 0;
const names = new Set();
for (const [i, r] of replies.entries()) {
  checkEqual(r.choices[0].finish_reason, "stop", `request ${i} finish_reason`);
  const v = checkValid(r.choices[0].message.content, `request ${i}`);
  if (v && validate(v)) {
    valid++;
    names.add(v.name);
  }
}
checkEqual(valid, 100, "valid outputs of 100");
check(names.size > 50, "temperature 1 gives varied outputs", names.size);

// --- streamed: the concatenated deltas validate.
const streamed = await collect(
  await client.chat.completions.create({ model: MODEL, messages, temperature: 1, seed: 5, max_tokens: 1500, response_format: format, stream: true }), true);
checkEqual(streamed.finish[0], "stop", "streamed finish_reason");
checkValid(streamed.text[0], "streamed");

// --- n > 1: every sample is valid.
const multi = await client.chat.completions.create({ model: MODEL, messages, temperature: 1, seed: 9, n: 3, max_tokens: 1500, response_format: format });
for (const c of multi.choices) checkValid(c.message.content, `n=3 choice ${c.index}`);

// --- json_object: the answers that end are JSON objects.
let objects = 0;
for (let i = 0; i < 8; i++) {
  const r = await client.chat.completions.create({ model: MODEL, messages, temperature: 1, seed: 50 + i, max_tokens: 64, response_format: { type: "json_object" } });
  const c = r.choices[0];
  if (c.finish_reason !== "stop") continue;  // a free-form string may run past max_tokens
  objects++;
  let v = null;
  try { v = JSON.parse(c.message.content); } catch (e) { check(false, "json_object parses", c.message.content); }
  check(v !== null && typeof v === "object" && !Array.isArray(v), "json_object is an object", c.message.content);
}
check(objects > 0, "some json_object answers end", objects);

// --- completions endpoint, vLLM's guided_json (a string schema) and guided_regex.
const comp = await client.completions.create({ model: MODEL, prompt: "JSON:", temperature: 1, seed: 3, max_tokens: 1500, guided_json: JSON.stringify(schema) });
checkEqual(comp.choices[0].finish_reason, "stop", "completions guided_json finish_reason");
checkValid(comp.choices[0].text, "completions guided_json");
const regex = "[A-Z][a-z]{1,6} (19|20)[0-9]{2}(-[0-9]{2})?";
const re = new RegExp(`^(?:${regex})$`);
for (let i = 0; i < 10; i++) {
  const r = await client.completions.create({ model: MODEL, prompt: "Name and year:", temperature: 1, seed: 70 + i, max_tokens: 50, guided_regex: regex });
  check(re.test(r.choices[0].text), "guided_regex output matches", r.choices[0].text);
  checkEqual(r.choices[0].finish_reason, "stop", "guided_regex finish_reason");
}

// --- vLLM's guided_grammar (completions) and structured_outputs.grammar (chat): a grammar of a
// regular language (GBNF and Lark) checked with RegExp, and a recursive one (nested lists) with
// JSON.parse.
const plan = `root ::= step ("; " step){0,2}
step ::= verb " " [0-9]{1,3} unit   # verb, amount, unit
verb ::= "add" | "mix" | "heat"
unit ::= "g" | "ml" | " minutes"`;
const planRe = /^(add|mix|heat) [0-9]{1,3}(g|ml| minutes)(; (add|mix|heat) [0-9]{1,3}(g|ml| minutes)){0,2}$/;
const lists = `root ::= list
list ::= "[" (item ("," item)?)? "]"
item ::= [0-9] | list`;
// The same in Lark's notation (vLLM takes both): a terminal, %import, an alias.
const larkPlan = `start: step ("; " step)~0..2
step: VERB " " AMOUNT UNIT -> instruction   // verb, amount, unit
VERB: "add" | "mix" | "heat"
AMOUNT: /[0-9]{1,3}/
UNIT: "g" | "ml" | " minutes"`;
for (let i = 0; i < 6; i++) {
  const lark = await client.completions.create({ model: MODEL, prompt: "Recipe:", temperature: 1, seed: 40 + i, max_tokens: 60, guided_grammar: larkPlan });
  check(planRe.test(lark.choices[0].text), "Lark guided_grammar output matches", lark.choices[0].text);
  const r = await client.completions.create({ model: MODEL, prompt: "Recipe:", temperature: 1, seed: 50 + i, max_tokens: 60, guided_grammar: plan });
  check(planRe.test(r.choices[0].text), "guided_grammar output matches", r.choices[0].text);
  checkEqual(r.choices[0].finish_reason, "stop", "guided_grammar finish_reason");
  const c = await client.chat.completions.create({ model: MODEL, messages, temperature: 1, seed: 60 + i, max_tokens: 1500, structured_outputs: { grammar: lists } });
  let value = null;
  try {
    value = JSON.parse(c.choices[0].message.content);
  } catch (e) {}
  check(Array.isArray(value), "structured_outputs.grammar output is a JSON list", c.choices[0].message.content);
  checkEqual(c.choices[0].finish_reason, "stop", "structured_outputs.grammar finish_reason");
}

// --- guided_choice and structured_outputs.choice.
const choices = ["positive", "negative", "neutral", "ça dépend"];
const seen = new Set();
for (let i = 0; i < 12; i++) {
  const body = i % 2 === 0 ? { guided_choice: choices } : { structured_outputs: { choice: choices } };
  const r = await client.chat.completions.create({ model: MODEL, messages, temperature: 1, seed: 90 + i, max_tokens: 20, ...body });
  check(choices.includes(r.choices[0].message.content), "choice output is one of the choices", r.choices[0].message.content);
  seen.add(r.choices[0].message.content);
}
check(seen.size >= 2, "choices vary at temperature 1", [...seen]);

// --- errors: 400s naming the field and the problem.
async function expect400(body, param, words, endpoint = "chat") {
  try {
    if (endpoint === "chat") await client.chat.completions.create({ model: MODEL, messages, max_tokens: 5, ...body });
    else await client.completions.create({ model: MODEL, prompt: "x", max_tokens: 5, ...body });
    check(false, `400 expected for ${JSON.stringify(body)}`);
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, `BadRequestError for ${JSON.stringify(body)}`, String(e));
    checkEqual(e.param, param, `param of the 400 for ${JSON.stringify(body)}`);
    check(String(e.message).includes(words), `message names '${words}'`, e.message);
  }
}
const withSchema = (s) => ({ response_format: { type: "json_schema", json_schema: { name: "x", schema: s } } });
await expect400(withSchema({ type: "integer", multipleOf: 3 }), "response_format", "unsupported JSON schema keyword 'multipleOf'");
await expect400(withSchema({ type: "number", minimum: 0.25, maximum: 0.75 }), "response_format", "no number between the bounds at /");
await expect400(withSchema({ type: "object", properties: { d: { type: "string", format: "ipv6" } } }), "response_format", "format 'ipv6' at /properties/d");
await expect400(withSchema({ oneOf: [{ type: "string" }] }), "response_format", "'oneOf'");
await expect400({ response_format: { type: "json_schema", json_schema: { name: "x" } } }, "response_format.json_schema.schema", "is required");
await expect400({ response_format: { type: "xml" } }, "response_format.type", "'xml'");
await expect400({ guided_regex: "(?=a)b" }, "guided_regex", "lookahead", "completions");
await expect400({ guided_choice: [] }, "guided_choice", "non-empty list");
await expect400({ guided_json: { type: "object" }, guided_regex: "a" }, "guided_regex", "give one");
await expect400({ guided_grammar: "root ::= item\nitem ::= x" }, "guided_grammar", "rule 'x' is used but not defined at line 2, column 10");
await expect400({ structured_outputs: { grammar: 5 } }, "structured_outputs.grammar", "must be a string");
await expect400({ guided_grammar: "begin: \"a\"" }, "guided_grammar", "there is no rule 'start' (in Lark", "completions");
await expect400({ response_format: { type: "json_object" }, min_tokens: 3 }, "min_tokens", "structured outputs");

// --- the server still serves after the errors.
const after = await client.chat.completions.create({ model: MODEL, messages, temperature: 1, seed: 4, max_tokens: 1500, response_format: format });
checkValid(after.choices[0].message.content, "after the errors");

finish();
