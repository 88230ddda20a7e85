"""transformer_lib.finetune (chapter 20): MiniLM as a classifier.

The classifier is checked against the encoder and head computed by hand, freezing against the
weights before and after a real optimizer step, the rank correlation against scipy (the shipped
spam split's properties are tested in test_data.py).
"""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from transformer_lib import finetune as ft
from transformer_lib.data.classification import load_spam
from transformer_lib.pretrained import load_minilm

TEXTS = ["Cheap meds online, click now!!!", "Re: the meeting moved to Tuesday",
         "You have WON a free cruise | claim your prize today", "Patch for the kernel build, see attached",
         "Limited offer: lose 20 pounds in 10 days", "Lunch tomorrow? | I can do noon at the usual place"]
LABELS = torch.tensor([1, 0, 1, 0, 1, 0])


@pytest.fixture(scope="module")
def lm():
    return load_minilm("cpu")


@pytest.fixture(scope="module")
def batch(lm):
    return ft.tokenize(lm, TEXTS, 16)


def fresh(lm, seed=0):
    import copy

    torch.manual_seed(seed)
    return ft.SentenceClassifier(copy.deepcopy(lm.model), num_classes=2, dropout=0.0)


# -- the classifier is the encoder plus a head ---------------------------------------------------

def test_logits_equal_the_encoder_and_head_computed_by_hand(lm, batch):
    ids, mask = batch
    model = fresh(lm).eval()
    with torch.no_grad():
        states = lm.model(ids, mask)  # (B, L, D): chapter 14's encoder, unchanged
        m = mask.double().unsqueeze(-1)
        pooled = (states.double() * m).sum(1) / m.sum(1)  # mean over real tokens, by hand
        by_hand = pooled @ model.head.weight.double().T + model.head.bias.double()
        got = model(ids, mask)
    assert got.shape == (len(TEXTS), 2)
    torch.testing.assert_close(got.double(), by_hand, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("start", [0, 2, 4, 6])
def test_starting_from_cached_frozen_states_gives_the_same_logits(lm, batch, start):
    ids, mask = batch
    model = fresh(lm).eval()
    with torch.no_grad():
        full = model(ids, mask)
        resumed = model.forward_from(ft.frozen_states(model, ids, mask, start, batch_size=4), mask, start)
    torch.testing.assert_close(resumed, full, atol=1e-5, rtol=1e-5)


def test_extra_padding_does_not_change_the_logits(lm, batch):
    ids, mask = batch
    model = fresh(lm).eval()
    pad_ids = torch.cat([ids, torch.zeros(ids.shape[0], 5, dtype=ids.dtype)], 1)
    pad_mask = torch.cat([mask, torch.zeros(mask.shape[0], 5, dtype=mask.dtype)], 1)
    with torch.no_grad():
        torch.testing.assert_close(model(pad_ids, pad_mask), model(ids, mask), atol=1e-5, rtol=1e-5)


def test_tokenize_cuts_long_texts_and_ends_them_with_sep(lm):
    ids, mask = ft.tokenize(lm, ["word " * 50, "short"], 10)
    sep = lm.tokenizer.token_to_id("[SEP]")
    assert ids.shape == (2, 10) and mask[0].sum() == 10 and ids[0, -1] == sep
    full, _ = lm.token_ids(["word " * 50])
    assert torch.equal(ids[0, :9], full[0, :9])  # the start is the text's own tokens
    assert ids[1, int(mask[1].sum()) - 1] == sep and mask[1, int(mask[1].sum()):].sum() == 0


# -- freezing ------------------------------------------------------------------------------------

def _block_params(block):
    return sum(p.numel() for p in block.parameters())


@pytest.mark.parametrize("top", [0, 1, 3, 6])
def test_trainable_count_is_the_head_plus_the_top_blocks(lm, top):
    model = fresh(lm)
    got = ft.set_trainable(model, top)
    head = 384 * 2 + 2
    assert got == head + sum(_block_params(b) for b in model.encoder.blocks[6 - top:])
    assert ft.count_trainable(model) == got
    everything = ft.set_trainable(model, 6, embeddings=True)
    assert everything == sum(p.numel() for p in model.parameters())


def test_a_training_step_leaves_frozen_weights_bit_identical(lm, batch):
    ids, mask = batch
    model = fresh(lm)
    ft.set_trainable(model, 2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ft.train_classifier(model, ids, mask, LABELS, lr=1e-3, epochs=1, batch_size=6, seed=0)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert changed and changed <= trainable
    assert all(n.startswith(("head.", "encoder.blocks.4.", "encoder.blocks.5.")) for n in trainable)
    assert any(n.startswith("encoder.blocks.4.") for n in changed) and "head.weight" in changed


def test_training_the_head_on_cached_features_fits_a_small_set(lm, batch):
    ids, mask = batch
    model = fresh(lm)
    ft.set_trainable(model, 0)
    states = ft.frozen_states(model, ids, mask, 6)
    before = F.cross_entropy(ft.predict(model, states, mask, start_layer=6), LABELS).item()
    hist = ft.train_classifier(model, states, mask, LABELS, lr=0.05, epochs=40, batch_size=3, seed=1,
                               start_layer=6, evaluate=lambda m: ft.accuracy(ft.predict(m, states, mask, 6), LABELS))
    after = F.cross_entropy(ft.predict(model, states, mask, start_layer=6), LABELS).item()
    assert len(hist["eval"]) == len(hist["epoch_loss"]) == 40 and len(hist["loss"]) == 40 * 2
    assert after < before / 2 and hist["eval"][-1] == 1.0 and hist["epoch_loss"][-1] < hist["epoch_loss"][0]
    assert not model.training


def test_the_same_seed_trains_the_same_weights(lm, batch):
    ids, mask = batch
    weights = []
    for _ in range(2):
        model = fresh(lm, seed=3)
        model.dropout.p = 0.3  # dropout is seeded too
        ft.set_trainable(model, 1)
        ft.train_classifier(model, ids, mask, LABELS, lr=1e-3, epochs=2, batch_size=4, seed=5)
        weights.append(model.head.weight.detach().clone())
    assert torch.equal(weights[0], weights[1])


# -- forgetting ----------------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=3, max_size=40, unique=True),
       st.randoms(use_true_random=False))
def test_spearman_equals_scipy(values, rnd):
    a = torch.tensor(values, dtype=torch.float64)
    perm = list(range(len(values)))
    rnd.shuffle(perm)
    b = a[perm] + 0.01 * torch.arange(len(values), dtype=torch.float64)
    if len(set(b.tolist())) < len(values):
        return
    assert ft.spearman(a, b) == pytest.approx(spearmanr(a.numpy(), b.numpy()).statistic, abs=1e-9)


def test_similarity_agreement_is_one_for_the_same_encoder_and_lower_for_noise(lm, batch):
    ids, mask = batch
    e = ft.sentence_embeddings(lm.model, ids, mask)
    assert ft.similarity_agreement(e, e.clone()) == pytest.approx(1.0)
    torch.manual_seed(0)
    assert ft.similarity_agreement(e, torch.randn_like(e)) < 0.9
    whole = lm.encode(["a short one", "another short sentence"])
    ids2, mask2 = ft.tokenize(lm, ["a short one", "another short sentence"], 64)
    torch.testing.assert_close(ft.sentence_embeddings(lm.model, ids2, mask2), whole, atol=1e-5, rtol=1e-5)


# -- bad input -----------------------------------------------------------------------------------

def test_bad_inputs_raise_errors_naming_the_argument(lm, batch):
    ids, mask = batch
    model = fresh(lm)
    ft.set_trainable(model, 0)
    cases = [
        (lambda: load_spam("dev"), ValueError, "split"),
        (lambda: load_spam(3), TypeError, "split"),
        (lambda: ft.tokenize(lm, TEXTS, 1), ValueError, "max_tokens"),
        (lambda: ft.SentenceClassifier(lm.model, num_classes=1), ValueError, "num_classes"),
        (lambda: ft.SentenceClassifier(lm.model, dropout=1.5), ValueError, "dropout"),
        (lambda: ft.SentenceClassifier("minilm"), TypeError, "encoder"),
        (lambda: ft.set_trainable(model, 7), ValueError, "top_layers"),
        (lambda: ft.set_trainable(model, 1, embeddings="yes"), TypeError, "embeddings"),
        (lambda: ft.set_trainable(torch.nn.Linear(2, 2), 1), TypeError, "model"),
        (lambda: ft.frozen_states(model, ids, mask, 9), ValueError, "start_layer"),
        (lambda: ft.train_classifier(model, ids, mask, LABELS, lr=0.0, epochs=1), ValueError, "lr"),
        (lambda: ft.train_classifier(model, ids, mask, LABELS, lr=1e-3, epochs=0), ValueError, "epochs"),
        (lambda: ft.train_classifier(model, ids, mask, LABELS, lr=1e-3, epochs=1, batch_size=0), ValueError,
         "batch_size"),
        (lambda: ft.train_classifier(model, ids, mask, LABELS[:3], lr=1e-3, epochs=1), ValueError, "labels"),
        (lambda: ft.train_classifier(model, ids, mask, LABELS + 2, lr=1e-3, epochs=1), ValueError, "labels"),
        (lambda: ft.train_classifier(model, ids, mask, LABELS.float(), lr=1e-3, epochs=1), ValueError, "labels"),
        (lambda: ft.train_classifier(model, ids, mask[:, :3], LABELS, lr=1e-3, epochs=1), ValueError,
         "attention_mask"),
        (lambda: ft.train_classifier(model, ids, mask * 0, LABELS, lr=1e-3, epochs=1), ValueError, "attention_mask"),
        (lambda: ft.train_classifier(model, ids.tolist(), mask, LABELS, lr=1e-3, epochs=1), TypeError, "tokens"),
        (lambda: ft.train_classifier(model, ids, mask, LABELS, lr=1e-3, epochs=1, start_layer=6), ValueError,
         "start_layer"),
        (lambda: ft.accuracy(torch.zeros(3), LABELS), ValueError, "logits"),
        (lambda: ft.spearman(torch.zeros(2), torch.zeros(2)), ValueError, "a and b"),
        (lambda: ft.similarity_agreement(torch.zeros(4, 3), torch.zeros(5, 3)), ValueError, "before"),
    ]
    for call, error, name in cases:
        with pytest.raises(error, match=name):
            call()
    frozen = fresh(lm)
    frozen.requires_grad_(False)
    with pytest.raises(ValueError, match="trainable"):
        ft.train_classifier(frozen, ids, mask, LABELS, lr=1e-3, epochs=1)
