// Golden data for the SentencePiece-converted tokenizers (Llama 2, Gemma 3), written by an
// independent implementation: Tokenizers.js (@huggingface/tokenizers), with transformers.js's
// tokenizer (@lenml/tokenizers) run beside it as a second opinion. Same format as
// tools/tokenizer_golden.py (see there); "extra" rows carry their own text (strings the
// shared corpus lacks: these tokenizers' special tokens inside text, leading spaces, "▁").
//
//   node tools/tokenizer_golden_sp.mjs [--out-dir tests/data/tokenizer]
//
// Needs third_party/npm installed (scripts/install_deps.sh). Prints every string on which
// the two JS implementations disagree; such strings are left out of the golden file (there
// is no Rust oracle here to say which is right), each listed in the meta line.
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const NPM = path.join(ROOT, "third_party/npm/node_modules");
const require = createRequire(path.join(NPM, "x.js"));
const { Tokenizer } = await import(path.join(NPM, "@huggingface/tokenizers/dist/tokenizers.mjs"));
const lenml = require("@lenml/tokenizers");

const outDir = process.argv.includes("--out-dir")
  ? process.argv[process.argv.indexOf("--out-dir") + 1]
  : path.join(ROOT, "tests/data/tokenizer");

const sha256 = (buf) => crypto.createHash("sha256").update(buf).digest("hex");

// Deterministic PRNG (mulberry32) for the random decode cases.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const EXTRA = {
  common: [
    "Hello world", " Hello world", "  Hello", "Hello ", "Hello  world  ", " ", "  ", "\u2581",
    "\u2581Hello", "a\u2581b", "\u2581 \u2581", "\n", " \n ", "\t\tx", "Hello\nworld\n\n",
    "\u00e9t\u00e9", "\u4f60\u597d\u4e16\u754c", "\ud83d\ude00 \ud83d\udc4d\ud83c\udffd",
    "\u{2f800}\u{30000}\u{e0001}", "\ufffd", "<0x41>", "<0xE4><0xBD><0xA0>", "<unk>",
  ],
  mistral: [
    "<s>", "</s>", "<s>Hello", "<s> Hello", "Hello<s>", "Hello <s> world", "Hello</s>world",
    "<s><s>", " <s>", "[INST] Hi [/INST]", "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]",
    "<unk>x<unk>", "a<s", "s>", "<s >",
  ],
  gemma3: [
    "<bos>", "<eos>", "<bos>Hello", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "Hello <start_of_turn> world", "<start_of_image>", "<pad><mask>", "\n\n\n", "    indented",
    "\t\t\tx", "<unused0>", "<start_of_turn", "a  b   c", "</s>",
  ],
};

function loadCorpus() {
  const file = path.join(ROOT, "tests/data/tokenizer/corpus.jsonl");
  const raw = fs.readFileSync(file);
  const rows = raw.toString("utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l));
  return { rows, sha: sha256(raw) };
}

function golden(name, pkg, corpus) {
  const dir = path.join(NPM, "@lenml", pkg, "models");
  const tokJsonRaw = fs.readFileSync(path.join(dir, "tokenizer.json"));
  const tokJson = JSON.parse(tokJsonRaw.toString("utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const tok = new Tokenizer(tokJson, config);
  const other = lenml.TokenizerLoader.fromPreTrained({ tokenizerJSON: tokJson, tokenizerConfig: config });

  const enc = (t, text, special) => Array.from(t.encode(text, { add_special_tokens: special }).ids);
  const encOther = (text, special) => Array.from(other.encode(text, { add_special_tokens: special }));
  const dec = (ids, skip) => tok.decode(ids, { skip_special_tokens: skip });
  const decOther = (ids, skip) => other.decode(ids, { skip_special_tokens: skip });
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

  const disagree = [];
  const rows = [];
  const texts = corpus.rows.map((r) => ({ id: r.id, text: r.text }));
  for (const t of EXTRA.common.concat(EXTRA[name])) texts.push({ extra: true, text: t });
  for (const entry of texts) {
    const text = entry.text;
    const plain = enc(tok, text, false);
    const special = enc(tok, text, true);
    const decoded = dec(special, false);
    const decodedSkip = dec(special, true);
    const mismatch = [];
    if (!same(plain, encOther(text, false))) mismatch.push("encode");
    if (!same(special, encOther(text, true))) mismatch.push("encode(add_special_tokens)");
    if (decoded !== decOther(special, false)) mismatch.push("decode");
    if (decodedSkip !== decOther(special, true)) mismatch.push("decode(skip)");
    if (mismatch.length) {
      disagree.push({ ...(entry.extra ? { text } : { id: entry.id }), differs: mismatch });
      continue;
    }
    const row = entry.extra ? { text, ids: plain } : { id: entry.id, ids: plain };
    row.ids_special = special;
    if (decoded !== text) row.decoded = decoded;
    if (decodedSkip !== decoded) row.decoded_skip = decodedSkip;
    rows.push(row);
  }

  // Random id lists: runs of byte-fallback tokens that spell whole characters, "▁" tokens at
  // the start (the Strip decoder), added tokens, random ids.
  // Two input classes are left out on purpose, because both JS implementations differ from
  // HF's Rust code there (byte_fallback.rs, tokenizer/mod.rs), and are checked by hand-derived
  // C++ tests instead (synthetic_test.cc, SentencePieceDecoders):
  //   - a run of byte tokens that is not UTF-8: Rust gives one U+FFFD per byte of the run, JS
  //     one per maximal ill-formed subpart, keeping the valid characters;
  //   - ids past the vocabulary: Rust skips them, JS decodes them as the unk token.
  const vocab = tok.get_vocab(true);
  let size = 0;
  for (const id of vocab.values()) size = Math.max(size, id + 1);
  const added = [...tok.get_added_tokens_decoder().keys()].sort((a, b) => a - b);
  const byteId = new Array(256), spaces = [];
  for (const [t, id] of vocab) {
    const m = /^<0x([0-9A-F]{2})>$/.exec(t);
    if (m) byteId[parseInt(m[1], 16)] = id;
    if (t.startsWith("\u2581") && t.length <= 3) spaces.push(id);
  }
  spaces.sort((a, b) => a - b);
  const rand = rng(7);
  const pick = (a) => a[Math.floor(rand() * a.length)];
  const randomChar = () => {
    const r = rand();
    const cp = r < 0.2 ? Math.floor(rand() * 0x80)
      : r < 0.5 ? 0x80 + Math.floor(rand() * 0x780)
      : r < 0.8 ? 0x800 + Math.floor(rand() * 0xd000)
      : 0x10000 + Math.floor(rand() * 0x30000);
    return String.fromCodePoint(cp >= 0xd800 && cp < 0xe000 ? cp + 0x800 : cp);
  };
  const decodeRows = [];
  for (let c = 0; c < 400; ++c) {
    const ids = [];
    const n = 1 + Math.floor(rand() * 12);
    for (let k = 0; k < n; ++k) {
      const r = rand();
      if (r < 0.35) for (const b of Buffer.from(randomChar(), "utf8")) ids.push(byteId[b]);
      else if (r < 0.5) ids.push(pick(spaces));
      else if (r < 0.65) ids.push(pick(added));
      else ids.push(Math.floor(rand() * size));
    }
    // A random id may be a byte token and break a run: such a case is left out (see above).
    const validRuns = (skip) => {
      let run = [];
      const ok = () => { try { new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(run)); return true; } catch { return false; } };
      for (const id of ids) {
        if (skip && added.includes(id) && tok.get_added_tokens_decoder().get(id).special) continue;
        const m = /^<0x([0-9A-F]{2})>$/.exec(tok.id_to_token(id) ?? "");
        if (m) { run.push(parseInt(m[1], 16)); continue; }
        if (!ok()) return false;
        run = [];
      }
      return ok();
    };
    if (!validRuns(false) || !validRuns(true)) {
      disagree.push({ decode_ids: ids, differs: ["not generated: a byte-token run that is not UTF-8"] });
      continue;
    }
    const text = dec(ids, false), textSkip = dec(ids, true);
    if (text !== decOther(ids, false) || textSkip !== decOther(ids, true)) {
      disagree.push({ decode_ids: ids, differs: ["decode"] });
      continue;
    }
    decodeRows.push({ decode_ids: ids, text, text_skip: textSkip });
  }

  const tokenRows = [];
  const tids = new Set(added.slice(0, 5));
  for (let k = 0; k < 300; ++k) tids.add(Math.floor(rand() * (size + 10)));
  for (const id of [...tids].sort((a, b) => a - b)) {
    const t = tok.id_to_token(id);
    tokenRows.push({ token_id: id, token: t === undefined ? null : t });
  }

  const meta = {
    reference: "@huggingface/tokenizers " + JSON.parse(fs.readFileSync(path.join(NPM, "@huggingface/tokenizers/package.json"))).version,
    second_opinion: "@lenml/tokenizers " + JSON.parse(fs.readFileSync(path.join(NPM, "@lenml/tokenizers/package.json"))).version,
    tokenizer_json_sha256: sha256(tokJsonRaw),
    corpus_sha256: corpus.sha,
    count: corpus.rows.length,
    vocab_size: size,
    left_out: disagree,
  };
  const out = path.join(outDir, `golden_${name}.jsonl`);
  // ASCII output with \u escapes, as Python's json.dumps(ensure_ascii=True) writes.
  const ascii = (o) => JSON.stringify(o).replace(/[\u007f-\uffff]/g, (ch) => "\\u" + ch.charCodeAt(0).toString(16).padStart(4, "0"));
  const lines = [ascii({ meta })].concat(rows.map(ascii), decodeRows.map(ascii), tokenRows.map(ascii));
  fs.writeFileSync(out, lines.join("\n") + "\n");
  console.log(`${name}: ${rows.length} strings, ${decodeRows.length} decode cases, ${disagree.length} left out -> ${out}`);
  for (const d of disagree) console.log("  left out:", JSON.stringify(d).slice(0, 300));
}

const corpus = loadCorpus();
const only = process.argv.includes("--only") ? process.argv[process.argv.indexOf("--only") + 1] : null;
for (const [name, pkg] of [["mistral", "tokenizer-llama2"], ["gemma3", "tokenizer-gemma3"]]) {
  if (!only || only === name) golden(name, pkg, corpus);
}
