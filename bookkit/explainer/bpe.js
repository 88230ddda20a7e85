/* The book's byte-level BPE tokenizer (chapter 15, transformer_lib.tokenization) in JavaScript.
 *
 * The same two steps as the Python encoder, and the same ids (tests/bookkit/bpe_parity.js holds
 * them equal over accents, emoji, CJK, tabs, runs of spaces and newlines):
 *
 *   1. cut the text into chunks with GPT-2's pattern (a word with its leading space, digits,
 *      punctuation, whitespace); special tokens are cut out first;
 *   2. per chunk, start from its UTF-8 bytes and repeatedly merge the adjacent pair that was
 *      learned earliest, until no learned pair is left.
 *
 * The character classes \p{L}, \p{N} and \s are NOT taken from the browser: each JavaScript engine
 * ships its own Unicode version, and JavaScript's \s differs from Python's (U+0085 and U+FEFF).
 * They come as code-point ranges in `classes` (written by bookkit/explainer/build.py from the
 * `regex` module the Python tokenizer uses), so both sides split every string the same way.
 *
 * Usage: const tok = new BPETokenizer(config.tokenizer, classes); tok.encode("text") -> [ids];
 * tok.tokenBytes(id) -> Uint8Array; tok.decode(ids) -> string.  Works in a page (window.BPETokenizer)
 * and in node (module.exports).
 */
(function (root) {
  "use strict";

  // GPT-2's byte -> printable character table (transformer_lib.tokenization.pretokenize.bytes_to_unicode)
  function bytesToUnicode() {
    const keep = [];
    for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
    for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
    for (let b = 0xae; b <= 0xff; b++) keep.push(b);
    const kept = new Set(keep), table = new Array(256);
    let extra = 0;
    for (let b = 0; b < 256; b++) table[b] = kept.has(b) ? String.fromCharCode(b) : String.fromCharCode(256 + extra++);
    return table;
  }
  const B2U = bytesToUnicode();
  const U2B = new Map(B2U.map((c, b) => [c, b]));

  function visibleToBytes(chars) {
    const out = [];
    for (const c of chars) {
      if (!U2B.has(c)) throw new Error("a merge holds a character that stands for no byte: " + c);
      out.push(U2B.get(c));
    }
    return out;
  }

  // [[lo, hi], ...] code-point ranges -> the inside of a regex character class (u flag)
  function rangesToClass(ranges) {
    const hex = (c) => "\\u{" + c.toString(16) + "}";
    return ranges.map(([lo, hi]) => (lo === hi ? hex(lo) : hex(lo) + "-" + hex(hi))).join("");
  }

  function splitPattern(classes) {
    const L = rangesToClass(classes.L), N = rangesToClass(classes.N), S = rangesToClass(classes.S);
    // GPT2_SPLIT_PATTERN, transformer_lib/tokenization/pretokenize.py, with \p{L}, \p{N}, \s spelled out
    const src = `'s|'t|'re|'ve|'m|'ll|'d| ?[${L}]+| ?[${N}]+| ?[^${S}${L}${N}]+|[${S}]+(?![^${S}])|[${S}]+`;
    return new RegExp(src, "gu");
  }

  const escapeRegExp = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const PAIR = 1 << 20; // pair key a * PAIR + b: exact for vocabularies under 2^20 tokens

  class BPETokenizer {
    /* tokenizer: {merges: [[a, b], ...] in GPT-2 characters, special_tokens: [...]} (BPETokenizer.to_json);
       classes: {L, N, S} code-point ranges. */
    constructor(tokenizer, classes) {
      if (!tokenizer || !Array.isArray(tokenizer.merges)) throw new TypeError("tokenizer must hold a merges list");
      if (!classes || !classes.L || !classes.N || !classes.S) throw new TypeError("classes must hold L, N and S ranges");
      this.vocab = [];                 // id -> Uint8Array of its bytes
      const index = new Map();         // visible string -> id (a bijection with byte strings)
      for (let b = 0; b < 256; b++) { this.vocab.push(Uint8Array.of(b)); index.set(B2U[b], b); }
      this.rank = new Map();           // pair key -> position in the merge list (earliest learned wins)
      this.mergedId = new Map();       // pair key -> the id the pair becomes
      tokenizer.merges.forEach(([a, b], position) => {
        if (!index.has(a) || !index.has(b)) throw new Error("merge " + a + " " + b + " uses a token no earlier merge made");
        const joined = a + b;
        if (!index.has(joined)) { index.set(joined, this.vocab.length); this.vocab.push(Uint8Array.from(visibleToBytes(joined))); }
        const key = index.get(a) * PAIR + index.get(b);
        if (!this.rank.has(key)) this.rank.set(key, position);
        this.mergedId.set(key, index.get(joined));
      });
      this.special = new Map();
      for (const s of tokenizer.special_tokens || []) this.special.set(s, this.vocab.length + this.special.size);
      this.specialById = new Map([...this.special].map(([s, i]) => [i, s]));
      const bySize = [...this.special.keys()].sort((x, y) => y.length - x.length);
      this.specialSplit = bySize.length ? new RegExp("(" + bySize.map(escapeRegExp).join("|") + ")", "u") : null;
      this.pattern = splitPattern(classes);
      this.encoder = new TextEncoder();
      this.cache = new Map();          // chunk -> ids
    }

    get size() { return this.vocab.length + this.special.size; }

    chunks(text) { return text.match(this.pattern) || []; }

    encodeChunk(bytes) {
      let ids = Array.from(bytes);
      while (ids.length >= 2) {
        let best = -1, bestRank = Infinity;
        for (let i = 0; i + 1 < ids.length; i++) {
          const r = this.rank.get(ids[i] * PAIR + ids[i + 1]);
          if (r !== undefined && r < bestRank) { bestRank = r; best = ids[i] * PAIR + ids[i + 1]; }
        }
        if (best < 0) break;
        const a = Math.floor(best / PAIR), b = best % PAIR, merged = this.mergedId.get(best), out = [];
        for (let i = 0; i < ids.length; i++) {
          if (i + 1 < ids.length && ids[i] === a && ids[i + 1] === b) { out.push(merged); i++; } else out.push(ids[i]);
        }
        ids = out;
      }
      return ids;
    }

    encode(text) {
      if (typeof text !== "string") throw new TypeError("text must be a string");
      const ids = [];
      const pieces = this.specialSplit ? text.split(this.specialSplit) : [text];
      for (const piece of pieces) {
        if (this.special.has(piece)) { ids.push(this.special.get(piece)); continue; }
        for (const chunk of this.chunks(piece)) {
          if (!this.cache.has(chunk)) this.cache.set(chunk, this.encodeChunk(this.encoder.encode(chunk)));
          ids.push(...this.cache.get(chunk));
        }
      }
      return ids;
    }

    tokenBytes(id) {
      if (this.specialById.has(id)) return this.encoder.encode(this.specialById.get(id));
      if (!(id >= 0 && id < this.vocab.length)) throw new RangeError("no token " + id);
      return this.vocab[id];
    }

    decode(ids) {
      const parts = ids.map((i) => this.tokenBytes(i)), n = parts.reduce((s, p) => s + p.length, 0);
      const all = new Uint8Array(n);
      let at = 0;
      for (const p of parts) { all.set(p, at); at += p.length; }
      return new TextDecoder("utf-8").decode(all);  // invalid bytes -> U+FFFD, as Python's errors="replace"
    }

    piece(id) { return new TextDecoder("utf-8").decode(this.tokenBytes(id)); }
  }

  if (typeof module !== "undefined" && module.exports) module.exports = { BPETokenizer, bytesToUnicode };
  else root.BPETokenizer = BPETokenizer;
})(typeof self !== "undefined" ? self : this);
