// Tokenizer parity, the JavaScript side: node bpe_parity.js CASES.json
// CASES.json = {tokenizer: {merges, special_tokens}, classes: {L, N, S}, strings: [...]} (written by
// tests/bookkit/test_explainer.py); prints {"ids": [[...], ...], "decoded": [...]} for the strings, in order.
"use strict";
const fs = require("fs");
const path = require("path");
const { BPETokenizer } = require(path.join(__dirname, "..", "..", "bookkit", "explainer", "bpe.js"));

const cases = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const tok = new BPETokenizer(cases.tokenizer, cases.classes);
const ids = cases.strings.map((s) => tok.encode(s));
process.stdout.write(JSON.stringify({ size: tok.size, ids, decoded: ids.map((i) => tok.decode(i)) }));
