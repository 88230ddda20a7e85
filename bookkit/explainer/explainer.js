/* The explainer page: the chapter-16 GPT in onnxruntime-web (WebAssembly, one thread).
 *
 * The model file (transformer_lib.export.export_onnx) has one input, tokens (1, L) int64, and
 * three outputs: logits (1, V) of the next token, attention (1, N, H, L, L), and config, the
 * UTF-8 JSON of the sizes and the tokenizer's merges. On every edit the page tokenizes the text
 * (bpe.js), runs the model once and redraws the candidates and the attention map. Runs never
 * overlap: an edit made during a run is computed right after it, with the newest text.
 *
 * window.explainer exposes the state for the tests: ready (a Promise), update(text) (a Promise
 * of the candidates), lastUpdateMs (edit to candidates on screen, in ms), ids and attention(layer, head).
 */
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const input = $("explainer-input"), next = $("explainer-next"), status = $("explainer-status");
  const temperatureBox = $("explainer-temperature"), topkBox = $("explainer-topk"), seedBox = $("explainer-seed");
  const layerBox = $("explainer-layer"), headBox = $("explainer-head"), canvas = $("explainer-attention");
  const SHOWN = 10;  // candidates listed (the issue asks for at least the top 10)

  ort.env.wasm.wasmPaths = new URL("explainer/ort/", document.baseURI).href;  // local files only
  ort.env.wasm.numThreads = 1;  // threads need cross-origin isolation, which a static host rarely gives
  ort.env.wasm.proxy = false;

  const state = { session: null, tok: null, config: null, classes: null, last: null, busy: false,
                  pending: null, rng: null, rngSeed: null, decoder: null, lastUpdateMs: null };

  // -- a seeded generator: mulberry32 (Tommy Ettinger's 32-bit generator, public domain) -------
  function mulberry32(seed) {
    let a = seed >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  // -- the model -------------------------------------------------------------------------------
  async function loadModel(bytes, name) {
    const session = await ort.InferenceSession.create(bytes, { executionProviders: ["wasm"] });
    for (const out of ["logits", "attention", "config"]) {
      if (!session.outputNames.includes(out)) throw new Error(name + " has no '" + out + "' output: export it with transformer_lib.export.export_onnx");
    }
    const probe = new ort.Tensor("int64", BigInt64Array.from([0n]), [1, 1]);
    const blob = (await session.run({ tokens: probe }, ["config"])).config.data;
    const config = JSON.parse(new TextDecoder("utf-8").decode(blob));
    const tok = new BPETokenizer(config.tokenizer, state.classes);
    if (tok.size !== config.vocab_size) throw new Error(name + ": the tokenizer has " + tok.size + " tokens, the model " + config.vocab_size);
    Object.assign(state, { session, config, tok, last: null });
    $("explainer-context").textContent = String(config.context);
    fillSelect(layerBox, config.num_layers, "layer ");
    fillSelect(headBox, config.num_heads, "head ");
    $("explainer-model").textContent = "Model: " + name + " (" + config.num_layers + " layers, " + config.num_heads +
      " heads, width " + config.d_model + ", " + config.vocab_size + " tokens, context " + config.context + ")";
  }

  function fillSelect(select, n, label) {
    const keep = Math.min(Number(select.value) || 0, n - 1);
    select.replaceChildren(...Array.from({ length: n }, (_, i) => new Option(label + (i + 1), String(i))));
    select.value = String(keep);
  }

  async function run(ids) {
    const tokens = new ort.Tensor("int64", BigInt64Array.from(ids, (i) => BigInt(i)), [1, ids.length]);
    const out = await state.session.run({ tokens }, ["logits", "attention"]);
    return { ids, logits: out.logits.data, attention: out.attention.data };
  }

  // -- probabilities -----------------------------------------------------------------------------
  function settings() {
    const t = Number(temperatureBox.value), k = Math.round(Number(topkBox.value));
    return { temperature: t > 0 && isFinite(t) ? t : 1, topk: k >= 1 ? Math.min(k, state.config.vocab_size) : 1 };
  }

  function probabilities(logits, temperature) {
    let max = -Infinity;
    for (const x of logits) max = Math.max(max, x);
    const p = new Float64Array(logits.length);
    let sum = 0;
    for (let i = 0; i < logits.length; i++) { p[i] = Math.exp((logits[i] - max) / temperature); sum += p[i]; }
    for (let i = 0; i < p.length; i++) p[i] /= sum;
    return p;
  }

  function ranked(p) {  // ids by probability, highest first (ties: lower id first)
    return Array.from(p.keys()).sort((a, b) => p[b] - p[a] || a - b);
  }

  // -- drawing -----------------------------------------------------------------------------------
  const show = (s) => s.replace(/ /g, "\u2423").replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5");

  function drawCandidates(result, text) {
    const { temperature, topk } = settings();
    const p = probabilities(result.logits, temperature), order = ranked(p);
    const items = order.slice(0, Math.max(SHOWN, 0)).map((id, rank) => {
      const li = document.createElement("li");
      li.dataset.tokenId = String(id);
      li.dataset.prob = p[id].toFixed(8);
      if (rank >= topk) li.classList.add("ex-outside");
      const bar = document.createElement("span");
      bar.className = "ex-bar";
      bar.style.width = (100 * p[id] / p[order[0]]).toFixed(1) + "%";
      const word = document.createElement("code");
      word.textContent = show(state.tok.piece(id));
      const num = document.createElement("span");
      num.className = "ex-prob";
      num.textContent = (100 * p[id]).toFixed(2) + "%";
      li.append(bar, word, num);
      return li;
    });
    next.replaceChildren(...items);
    next.dataset.text = text;
  }

  // perceptually uniform light-to-dark ramp (viridis stops, reversed so that more weight is darker)
  const RAMP = [[253, 231, 37], [94, 201, 98], [33, 145, 140], [59, 82, 139], [68, 1, 84]];
  function colour(w) {
    const x = Math.min(Math.max(w, 0), 1) * (RAMP.length - 1), i = Math.min(Math.floor(x), RAMP.length - 2), f = x - i;
    const c = RAMP[i].map((v, j) => Math.round(v + f * (RAMP[i + 1][j] - v)));
    return "rgb(" + c.join(",") + ")";
  }

  function drawAttention(result) {
    if (!result) return;
    const L = result.ids.length, H = state.config.num_heads;
    const layer = Number(layerBox.value) || 0, head = Number(headBox.value) || 0;
    const offset = ((layer * H) + head) * L * L;
    const box = canvas.parentElement.clientWidth || 320, size = Math.max(120, Math.min(box, 560));
    const ratio = window.devicePixelRatio || 1;
    canvas.style.width = size + "px"; canvas.style.height = size + "px";
    canvas.width = Math.round(size * ratio); canvas.height = Math.round(size * ratio);
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.fillStyle = getComputedStyle(canvas).getPropertyValue("--ex-canvas-bg") || "#fff";
    g.fillRect(0, 0, size, size);
    const cell = size / L;
    for (let q = 0; q < L; q++) {
      for (let k = 0; k <= q; k++) {
        g.fillStyle = colour(result.attention[offset + q * L + k]);
        g.fillRect(k * cell, q * cell, Math.ceil(cell), Math.ceil(cell));
      }
    }
    canvas.setAttribute("aria-label", "attention of layer " + (layer + 1) + ", head " + (head + 1) + " over " + L + " tokens");
    drawAxes(result.ids, size);
    drawScale();
    const tokens = $("explainer-tokens");
    tokens.replaceChildren(...result.ids.map((id, i) => {
      const span = document.createElement("code");
      span.textContent = show(state.tok.piece(id));
      span.title = "token " + (i + 1) + ", id " + id;
      return span;
    }));
  }

  // the axes: token q labels row q (left), token k labels column k (top), centred on it
  function drawAxes(ids, size) {
    const cell = size / ids.length, font = Math.max(4, Math.min(12, cell * 0.85));
    const rows = $("explainer-rows"), cols = $("explainer-cols");
    rows.style.height = size + "px"; cols.style.width = size + "px";
    rows.style.fontSize = cols.style.fontSize = font + "px";
    const label = (id, i, axis) => {
      const c = document.createElement("code");
      c.textContent = show(state.tok.piece(id));
      c.title = (axis === "row" ? "query: token " : "key: token ") + (i + 1);
      c.dataset.index = String(i);
      if (axis === "row") Object.assign(c.style, { top: i * cell + "px", height: cell + "px", lineHeight: cell + "px" });
      else Object.assign(c.style, { left: i * cell + "px", width: cell + "px", lineHeight: cell + "px" });
      return c;
    };
    rows.replaceChildren(...ids.map((id, i) => label(id, i, "row")));
    cols.replaceChildren(...ids.map((id, i) => label(id, i, "col")));
  }

  // the colour scale: weight 0 at the left end to 1 at the right, the map's own colours
  function drawScale() {
    const scale = $("explainer-scale"), g = scale.getContext("2d");
    for (let x = 0; x < scale.width; x++) {
      g.fillStyle = colour(x / (scale.width - 1));
      g.fillRect(x, 0, 1, scale.height);
    }
  }

  // the square under the pointer: which token attends to which, and with what weight
  function describeCell(event) {
    const result = state.last;
    if (!result) return;
    const rect = canvas.getBoundingClientRect(), L = result.ids.length;
    const k = Math.floor((event.clientX - rect.left) / rect.width * L), q = Math.floor((event.clientY - rect.top) / rect.height * L);
    if (q < 0 || k < 0 || q >= L || k >= L) return;
    const H = state.config.num_heads, layer = Number(layerBox.value) || 0, head = Number(headBox.value) || 0;
    const w = k <= q ? result.attention[((layer * H) + head) * L * L + q * L + k] : 0;
    const piece = (i) => "\u201c" + show(state.tok.piece(result.ids[i])) + "\u201d";
    $("explainer-cell").textContent = "token " + (q + 1) + " " + piece(q) + " attends to token " + (k + 1) + " " + piece(k) +
      " with weight " + w.toFixed(3) + (k > q ? " (a later token: masked)" : "");
  }

  // -- one update per edit, never two runs at once -----------------------------------------------
  function update(text) {
    return new Promise((resolve, reject) => {
      if (state.pending) state.pending.resolve(null);  // superseded by this newer text
      state.pending = { text, start: performance.now(), resolve, reject };
      pump();
    });
  }

  async function pump() {
    if (state.busy || !state.pending || !state.session) return;
    const job = state.pending;
    state.pending = null;
    state.busy = true;
    try {
      const ids = state.tok.encode(job.text).slice(-state.config.context);
      if (ids.length === 0) {
        next.replaceChildren();
        next.dataset.text = job.text;
        state.last = null;
        status.textContent = "Type something: the model needs at least one token.";
        job.resolve([]);
      } else {
        const result = await run(ids);
        state.last = result;
        drawCandidates(result, job.text);
        drawAttention(result);
        state.lastUpdateMs = performance.now() - job.start;
        status.textContent = ids.length + " tokens; updated in " + state.lastUpdateMs.toFixed(1) + " ms";
        job.resolve(candidates());
      }
    } catch (err) {
      status.textContent = "Error: " + err.message;
      job.reject(err);
    } finally {
      state.busy = false;
      if (state.pending) pump();
    }
  }

  function candidates() {
    return [...next.children].map((li) => ({ id: Number(li.dataset.tokenId), prob: Number(li.dataset.prob) }));
  }

  // -- "continue": one sampled token per click -------------------------------------------------
  async function continueOne() {
    if (!state.last) return;
    const seed = (Number(seedBox.value) >>> 0);
    if (state.rng === null || state.rngSeed !== seed) { state.rng = mulberry32(seed); state.rngSeed = seed; }
    const { temperature, topk } = settings();
    const p = probabilities(state.last.logits, temperature), top = ranked(p).slice(0, topk);
    const total = top.reduce((s, id) => s + p[id], 0);
    let u = state.rng() * total, chosen = top[top.length - 1];
    for (const id of top) { u -= p[id]; if (u < 0) { chosen = id; break; } }
    // a token may end inside a character: a streaming decoder holds its bytes until it is whole
    if (!state.decoder) state.decoder = new TextDecoder("utf-8");
    input.value += state.decoder.decode(state.tok.tokenBytes(chosen), { stream: true });
    await update(input.value);
    return chosen;
  }

  // -- the reader's own file ---------------------------------------------------------------------
  function readFile(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(new Uint8Array(reader.result));
      reader.onerror = () => reject(reader.error);
      reader.readAsArrayBuffer(file);
    });
  }

  async function openFile(file) {
    status.textContent = "Reading " + file.name + "...";
    try {
      await loadModel(await readFile(file), file.name);
      await update(input.value);
    } catch (err) {
      status.textContent = "Could not use " + file.name + ": " + err.message;
    }
  }

  // -- start -------------------------------------------------------------------------------------
  // A page opened from disk (file://, the offline bundle) may not fetch() its neighbours: there
  // the same files come in one script, explainer/offline.js (base64), loaded only then, and the
  // runtime's .wasm is handed to onnxruntime as a blob: URL made from those bytes.
  function offlineAssets() {
    return new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = "explainer/offline.js";
      script.onload = resolve;
      script.onerror = () => reject(new Error("explainer/offline.js is missing"));
      document.head.appendChild(script);
    }).then(() => {
      const data = window.EXPLAINER_OFFLINE;
      const bytes = (b64) => { const s = atob(b64), out = new Uint8Array(s.length);
                               for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i); return out; };
      const wasm = new Blob([bytes(data.wasm)], { type: "application/wasm" });
      ort.env.wasm.wasmPaths = { [data.wasmName]: URL.createObjectURL(wasm) };
      return [data.classes, bytes(data.model)];
    });
  }

  async function start() {
    const [classes, model] = location.protocol === "file:" ? await offlineAssets() : await Promise.all([
      fetch("explainer/classes.json").then((r) => r.json()),
      fetch("explainer/book_gpt.onnx").then((r) => r.arrayBuffer()).then((b) => new Uint8Array(b)),
    ]);
    state.classes = classes;
    await loadModel(model, "the book's GPT (chapter 16)");
    $("explainer-continue").disabled = false;
    input.addEventListener("input", () => { state.decoder = null; state.rng = null; update(input.value); });
    for (const box of [temperatureBox, topkBox]) box.addEventListener("input", () => state.last && drawCandidates(state.last, next.dataset.text));
    for (const box of [layerBox, headBox]) box.addEventListener("change", () => drawAttention(state.last));
    seedBox.addEventListener("input", () => { state.rng = null; });
    $("explainer-continue").addEventListener("click", continueOne);
    $("explainer-file").addEventListener("change", (e) => e.target.files[0] && openFile(e.target.files[0]));
    window.addEventListener("resize", () => drawAttention(state.last));
    canvas.addEventListener("mousemove", describeCell);
    canvas.addEventListener("click", describeCell);
    await update(input.value);
  }

  const ready = start().catch((err) => { status.textContent = "The model could not start: " + err.message; throw err; });
  window.explainer = {
    ready, update, candidates, continueOne, mulberry32,
    get lastUpdateMs() { return state.lastUpdateMs; },
    get ids() { return state.last ? state.last.ids.slice() : []; },
    attention(layer, head) {  // the shown text's map as rows (L x L), for the tests
      const L = state.last.ids.length, at = ((layer * state.config.num_heads) + head) * L * L;
      return Array.from({ length: L }, (_, q) => Array.from(state.last.attention.subarray(at + q * L, at + q * L + L)));
    },
    get tokenizer() { return state.tok; },
    get config() { return state.config; },
    colour,
  };
})();
