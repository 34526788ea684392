// Cancellation: COUNT long streaming requests; each client aborts (closes its connection)
// after receiving a few chunks. The test then checks /metrics: no blocks left in use.
import { MODEL, check, finish, makeClient } from "./common.mjs";

const count = Number(process.env.COUNT ?? "16");
const client = makeClient();

async function one(i) {
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model: MODEL, prompt: `Request number ${i} tells a long story about`, max_tokens: 3000,
      temperature: 1.0, seed: i, ignore_eos: true, stream: true },
    { signal: controller.signal });
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      check(chunk.choices[0].finish_reason === null, "no stream finishes before it is cancelled", chunk);
      if (++chunks === 3) controller.abort();
    }
    // The client ends the iteration quietly when it aborts.
    check(controller.signal.aborted, "the stream ends only because the client aborted it", i);
  } catch (e) {
    check(e.name === "APIUserAbortError" || controller.signal.aborted, "the client's abort ends the stream", String(e));
  }
  return chunks;
}

const got = await Promise.all(Array.from({ length: count }, (_, i) => one(i)));
// The client aborts after its 3rd chunk, but chunks that arrived in the same network read
// are still yielded (seen on a loaded 2-core CI machine: a 4th). The stream must still end
// within a few chunks of the abort, far short of its 3000 tokens.
check(got.every((n) => n >= 3 && n <= 8), "each stream was cancelled after 3 chunks (a few in flight)", got);
console.log(`CANCELLED ${count}`);
finish();
