#!/usr/bin/env python3
"""Writes the tokenizer test corpus: tests/data/tokenizer/corpus.jsonl.

Deterministic (fixed seed, no input files): running it twice gives the same bytes. Each line
is {"id": n, "cat": category, "text": string}. The strings aim at the places where a
byte-level BPE tokenizer can go wrong: the pre-tokenizer regex (contractions, letters vs
numbers vs punctuation, whitespace runs before a word, newlines), NFC normalization,
added/special tokens inside text, multi-byte UTF-8 and the BPE merge order on long words.

tools/tokenizer_golden.py encodes every string with Hugging Face `tokenizers`.

Usage: python3 tools/tokenizer_corpus.py [--out tests/data/tokenizer/corpus.jsonl]
"""
import argparse
import json
import os
import random

SEED = 20240601

WORDS = (
    "the of and to in is was for that with as on by at from his her an were are which this "
    "be or has had not but it they one all have their been its new more who also after first "
    "time year two would can other into when some than only over most these her world about "
    "people could state because through during between before under three while since city "
    "government country school system group number company university history music family "
    "tokenizer engine inference batch kernel memory attention decode prefill scheduler cache "
    "quickly brown fox jumps lazy dog serendipity antidisestablishmentarianism naïve café "
    "résumé coöperate façade jalapeño Zürich Ångström München São Paulo Kraków Dvořák "
    "supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis"
).split()

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M",
                "'LL", "'D", "'Ll", "'rE", "\u2019s", "\u2019t", "'\u017f", "'\u212a", "'x", "''s"]

CODE_SNIPPETS = [
    "def {f}({a}, {b}):\n    return {a} + {b} * {n}\n",
    "for (int {a} = 0; {a} < {n}; ++{a}) {{\n\t{f}[{a}] = {b}[{a}] >> 1;\n}}\n",
    "const {f} = async ({a}) => {{ await fetch(`/api/{a}?id=${{{b}}}`); }};",
    "#include <vector>\nstd::vector<int> {f}({n}, -1);  // {a}\n",
    "SELECT {a}, COUNT(*) FROM {f} WHERE {b} >= {n} GROUP BY {a};",
    "{{\"{a}\": [{n}, {n2}, null, true], \"{b}\": {{\"{f}\": \"x\\n\"}}}}",
    "if {a} != {b}:\n        raise ValueError(f\"bad {{{a}!r}}\")\n\n\n",
    "<div class=\"{f}\">\n  <span id='{a}'>{n}</span>\n</div>",
    "    {f}_{a} := {b}[{n}:{n2}]\r\n\treturn nil\r\n",
    "fn {f}(&mut self, {a}: u32) -> Result<(), Box<dyn Error>> {{ Ok(()) }}",
    "$ ./{f} --{a}={n} 2>&1 | grep -E '^[a-z]+$' >/dev/null",
    "x = {n}e-{n2}; y = 0x{hx}; z = {a}[::-1]  # comment with ünïcödé",
    "@@ -{n},{n2} +{n},{n2} @@\n-    {a}()\n+    {b}()\n",
    "    \n    \n        {a}\n\t\t\n",
]

IDENTS = ["x", "i", "idx", "buf", "self", "value", "kv_cache", "block_table", "slotMapping",
          "HTTPServer", "__init__", "_tmp", "data2", "camelCaseName", "snake_case_name", "ŝpeciål"]

CJK = [
    "我们今天去公园散步，天气非常好。", "机器学习是人工智能的一个分支。", "你好，世界！",
    "東京は日本の首都です。", "ひらがなとカタカナ、そして漢字。", "コンピューターでプログラムを書く。",
    "안녕하세요, 반갑습니다.", "한국어 텍스트와 숫자 123 섞기", "大规模语言模型的推理引擎",
    "「引用」と『二重引用』、（括弧）と【記号】", "ｆｕｌｌｗｉｄｔｈ　ＡＳＣＩＩ　１２３",
    "繁體中文與简体中文混合", "𠀀𠀁𪚥 (CJK Extension B)", "一二三四五六七八九十百千万亿",
]

SCRIPTS = [
    "مرحبا بالعالم، هذا نص عربي.", "اللُّغَةُ العَرَبِيَّةُ مع التشكيل", "١٢٣٤٥ أرقام عربية",
    "שלום עולם, זה טקסט בעברית.", "नमस्ते दुनिया, यह हिंदी पाठ है।", "क्षत्रिय ज्ञान श्री",
    "สวัสดีชาวโลก นี่คือข้อความภาษาไทย", "Привет, мир! Это русский текст.", "Ёжик в тумане",
    "Γειά σου Κόσμε! Ελληνικά κείμενα.", "Բարեւ աշխարհ", "გამარჯობა მსოფლიო", "ሰላም ለዓለም",
    "வணக்கம் உலகம்", "হ্যালো বিশ্ব", "Xin chào thế giới, tiếng Việt có dấu.", "Türkçe İıĞğŞş",
    "Ελληνικά ΣΊΣΥΦΟΣ", "ᚠᚢᚦᚨᚱᚲ runes", "ꦲꦏ꧀ꦱꦫ ꦗꦮ", "ⴰⵣⵓⵍ (Tifinagh)", "ᓀᐦᐃᔭᐍᐏᐣ (Cree)",
]

EMOJI = [
    "😀", "😂🤣", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵🇫🇷", "1️⃣2️⃣#️⃣", "❤️", "🧑🏿‍💻", "👩‍❤️‍💋‍👨",
    "🫠🫡🫶", "☺︎ vs ☺️", "🐍 python", "🚀🚀🚀", "🤖💬 Hello!", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👁️‍🗨️", "🧜‍♀️",
]

COMBINING = [
    "e\u0301", "E\u0301", "a\u0308o\u0308u\u0308", "n\u0303", "A\u030a", "\u212b", "\u2126",
    "\u212a", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "o\u0323\u0302",
    "o\u0302\u0323", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324"
    "\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330"
    "\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b"
    "\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "\u0958\u0959", "\u0344", "\u0340\u0341", "\u1e9b\u0323", "\ufb01 ligature", "\u00bd \u2153",
    "\u0041\u030a\u0301", "\u0fb2\u0f80", "\u0e4d\u0e32", "\u3099\u304b\u3099", "\uff76\uff9e",
]

SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
    "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|vision_pad|>",
    "<|reserved_special_token_5|>", "<|python_tag|>", "<|finetune_right_pad_id|>",
    "<|im_start", "im_end|>", "<|endoftext", "<||>", "<|", "|>", "<<|im_end|>>",
    "<|IM_START|>", "< |im_start| >", "<|begin_of_text|><|begin_of_text|>",
]

UNUSUAL = [
    "\x00", "\x01\x02\x03", "\x1b[31mred\x1b[0m", "\x7f", "\x85", "\ufeffBOM", "\ufffd",
    "\ue000\uf8ff", "\U000f0000", "\ufffe\uffff", "\U0001d518\U0001d52b\U0001d526\U0001d520",
    "\U0001d7d8\U0001d7d9", "\u2160\u216b\u2170", "\u00b2\u00b3\u00b9", "\u2070\u2074",
    "\u200b\u200c\u200d", "\u2060", "\u00ad", "\u034f", "\u2028\u2029", "\u180e", "\u3000",
    "\u00a0", "\u2007\u202f", "\u1680", "\u0378\u0379", "\U0001fa7b\U0001faf8",
    "\U00011f00\U00011f04", "\u0130\u0131", "\u1e9e\u00df", "\ufdfd", "\ua9c1", "\U0001f1e6",
    "\u2066\u2069", "\u202e reversed", "\U000e0001\U000e0041", "\u0600\u06dd", "\u17b4\u17b5",
    "\U00010400\U00010428", "\U0001f3fb", "\u0332\u0305", "\u20dd\u20e3", "\uFE0F", "\U000E0100",
    "\U0010FFFD", "\U00020000", "\U0002A6DF", "\U00031350", "\u0009\u000b\u000c\u001c\u001d",
]

SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\n\n\n",
          " \n", "\n ", " \t ", "\u00a0", "\u3000", "\u2003", "\u180e", "\u200b", "\x0b",
          "\x0c", "\u2028", "\u0085", "        ", " " * 17, "\n" * 7, "\t \n \t"]

RANGES = [  # (lo, hi, weight) code point ranges for random mixtures
    (0x20, 0x7e, 30), (0x09, 0x0d, 3), (0xa0, 0x24f, 8), (0x300, 0x36f, 3), (0x370, 0x3ff, 3),
    (0x400, 0x4ff, 4), (0x590, 0x6ff, 4), (0x900, 0x97f, 3), (0xe00, 0xe7f, 2),
    (0x1100, 0x11ff, 2), (0x2000, 0x206f, 3), (0x2100, 0x27bf, 3), (0x3000, 0x30ff, 4),
    (0x4e00, 0x9fff, 6), (0xac00, 0xd7a3, 4), (0xfe00, 0xfe0f, 1), (0xff00, 0xffef, 2),
    (0x1f300, 0x1faff, 5), (0x10000, 0x1007f, 1), (0x1d400, 0x1d7ff, 1), (0xe0000, 0xe007f, 1),
]


def pick(rng, seq):
    return seq[rng.randrange(len(seq))]


def sentence(rng):
    n = rng.randint(3, 18)
    words = []
    for i in range(n):
        w = pick(rng, WORDS)
        r = rng.random()
        if r < 0.12:
            w = w.capitalize()
        elif r < 0.16:
            w = w.upper()
        if rng.random() < 0.08:
            w += pick(rng, CONTRACTIONS)
        words.append(w)
    s = " ".join(words)
    s = s[0].upper() + s[1:]
    return s + pick(rng, [".", ".", "!", "?", "...", ":", ";", " —", ",", ""])


def prose(rng):
    parts = [sentence(rng) for _ in range(rng.randint(1, 5))]
    sep = pick(rng, [" ", " ", "  ", "\n", "\n\n", " \n"])
    text = sep.join(parts)
    if rng.random() < 0.2:
        text = "\"" + text + "\" (" + pick(rng, WORDS) + ")"
    return text


def code(rng):
    a, b, f = rng.sample(IDENTS, 3)
    return pick(rng, CODE_SNIPPETS).format(a=a, b=b, f=f, n=rng.randint(0, 100000),
                                           n2=rng.randint(0, 99), hx="%x" % rng.getrandbits(32))


def number(rng):
    kind = rng.randrange(10)
    if kind == 0:
        return str(rng.getrandbits(rng.randint(1, 160)))
    if kind == 1:
        return "%.*f" % (rng.randint(0, 9), rng.uniform(-1e6, 1e6))
    if kind == 2:
        return "{:,}".format(rng.randint(0, 10**12))
    if kind == 3:
        return "+1 (%03d) %03d-%04d" % (rng.randint(0, 999), rng.randint(0, 999), rng.randint(0, 9999))
    if kind == 4:
        return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (rng.randint(1, 2100), rng.randint(1, 12),
                                                     rng.randint(1, 28), rng.randint(0, 23),
                                                     rng.randint(0, 59), rng.randint(0, 59))
    if kind == 5:
        return "".join(pick(rng, ["abc", "x", "7", "42", "_", "-", "3.14", "v2", "Ⅻ", "٣", "１"])
                       for _ in range(rng.randint(2, 12)))
    if kind == 6:
        return "1" * rng.randint(1, 40) + " " + "0" * rng.randint(1, 40)
    if kind == 7:
        return " ".join(str(rng.randint(0, 10**rng.randint(1, 8))) for _ in range(rng.randint(2, 9)))
    if kind == 8:
        return "".join(chr(0x660 + rng.randrange(10)) for _ in range(rng.randint(1, 12))) + \
            " " + "".join(chr(0xff10 + rng.randrange(10)) for _ in range(rng.randint(1, 12)))
    return "$%d.%02d, %d%%, %dx%d, #%d, %d°C, ½ ¼ ¾ ²³" % (
        rng.randint(0, 9999), rng.randint(0, 99), rng.randint(0, 100), rng.randint(1, 4096),
        rng.randint(1, 4096), rng.randint(0, 999), rng.randint(-40, 50))


def whitespace(rng):
    out = []
    for _ in range(rng.randint(1, 8)):
        out.append(pick(rng, SPACES))
        if rng.random() < 0.7:
            out.append(pick(rng, WORDS + ["123", "!!", "(", ")", "x", "é", "中文", "🙂"]))
    if rng.random() < 0.5:
        out.append(pick(rng, SPACES))
    return "".join(out)


def cjk(rng):
    out = [pick(rng, CJK) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        out.insert(rng.randrange(len(out) + 1), sentence(rng))
    return pick(rng, ["", " ", "\n"]).join(out)


def scripts(rng):
    out = [pick(rng, SCRIPTS) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.3:
        out.append(number(rng))
    return " ".join(out)


def emoji(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        out.append(pick(rng, EMOJI))
        if rng.random() < 0.5:
            out.append(pick(rng, [" ", "", "\n", " " + pick(rng, WORDS) + " "]))
    return "".join(out)


def combining(rng):
    out = []
    for _ in range(rng.randint(1, 5)):
        out.append(pick(rng, COMBINING))
        if rng.random() < 0.5:
            out.append(pick(rng, [" ", "", pick(rng, WORDS), "'s", "\n"]))
    return "".join(out)


def specials(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.45:
            out.append(pick(rng, SPECIALS))
        elif r < 0.7:
            out.append(sentence(rng))
        else:
            out.append(pick(rng, SPACES + ["user", "assistant", "system\n", "Hi", "é", "😀"]))
    return "".join(out)


def chat(rng):
    roles = ["system", "user", "assistant"]
    out = []
    for _ in range(rng.randint(1, 3)):
        out.append("<|im_start|>%s\n%s<|im_end|>\n" % (pick(rng, roles), prose(rng)))
    if rng.random() < 0.5:
        out.append("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    if rng.random() < 0.5:
        out = ["<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|>"
               % prose(rng)]
    return "".join(out)


def unusual(rng):
    out = []
    for _ in range(rng.randint(1, 4)):
        out.append(pick(rng, UNUSUAL))
        if rng.random() < 0.5:
            out.append(pick(rng, [" ", "a", "1", "!", "\n", "'s", "x y"]))
    return "".join(out)


def contractions(rng):
    w = pick(rng, WORDS)
    c = pick(rng, CONTRACTIONS)
    return pick(rng, ["%s%s", "%s %s", "'%s%s", "%s%s'", "%s\n%s"]) % (w, c) + \
        pick(rng, ["", " ", " it" + pick(rng, CONTRACTIONS), "!"])


def random_mix(rng):
    ranges = [r[:2] for r in RANGES]
    weights = [r[2] for r in RANGES]
    chars = []
    for _ in range(rng.randint(1, 60)):
        lo, hi = rng.choices(ranges, weights)[0]
        cp = rng.randint(lo, hi)
        if 0xd800 <= cp <= 0xdfff:
            continue
        chars.append(chr(cp))
    return "".join(chars)


def long_text(rng, i):
    kind = i % 6
    if kind == 0:
        return " ".join(prose(rng) for _ in range(30))
    if kind == 1:
        return " " * rng.randint(300, 2000) + "x" + "\n" * rng.randint(10, 300)
    if kind == 2:
        return "".join(str(rng.randrange(10)) for _ in range(rng.randint(500, 3000)))
    if kind == 3:
        return pick(rng, ["a", "ab", "aaab", "的", "😀", "_"]) * rng.randint(200, 1500)
    if kind == 4:
        return "\n".join(code(rng) for _ in range(25))
    return "".join(random_mix(rng) for _ in range(40))


# Letters and digits from recent Unicode versions (15.0: Kawi, Nag Mundari, CJK Ext. H;
# 15.1: CJK Ext. I; 16.0: Todhri, Garay, Gurung Khema, Sunuwar, Ol Onal, Kirat Rai, outlined
# digits) next to a contraction: they show which Unicode version the regex engine knows.
PROBES = [
    "\U00011f04\U00011f05's", "\U0001e4d0\U0001e4d1's", "\U00031350's", "\U0002ebf0\U0002ebf1's",
    "\U000105c0\U000105c1's", "\U00010d4a\U00010d4b's", "\U00016100\U00016101's",
    "\U00011bc0\U00011bc1's", "\U0001e5d0\U0001e5d1's", "\U00016d43\U00016d44's",
    "x\U00011bf0\U00011bf1y", "x\U0001ccf0\U0001ccf1y", "x\U00016d70\U00016d71y",
    "x\U00010d40\U00010d41y", "x\U0001e5f1\U0001e5f2y", "x\U00016130\U00016131y",
]

GENERATORS = [
    ("prose", prose, 320), ("code", code, 240), ("number", number, 220),
    ("whitespace", whitespace, 220), ("cjk", cjk, 140), ("script", scripts, 180),
    ("emoji", emoji, 150), ("combining", combining, 150), ("special", specials, 220),
    ("chat", chat, 60), ("unusual", unusual, 180), ("contraction", contractions, 120),
    ("random", random_mix, 260),
]


def build_corpus():
    rng = random.Random(SEED)
    texts = [("edge", "")]
    texts += [("edge", chr(c)) for c in range(128)]
    texts += [("edge", s) for s in SPACES + SPECIALS + UNUSUAL + COMBINING + EMOJI]
    for cat, gen, count in GENERATORS:
        texts += [(cat, gen(rng)) for _ in range(count)]
    texts += [("long", long_text(rng, i)) for i in range(18)]
    texts += [("probe", p) for p in PROBES]  # appended last so earlier ids stay stable
    return texts


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(root, "tests/data/tokenizer/corpus.jsonl"))
    args = ap.parse_args()
    texts = build_corpus()
    with open(args.out, "w", encoding="ascii", newline="\n") as f:
        for i, (cat, text) in enumerate(texts):
            f.write(json.dumps({"id": i, "cat": cat, "text": text}, ensure_ascii=True) + "\n")
    print("wrote %d strings to %s" % (len(texts), args.out))


if __name__ == "__main__":
    main()
