"""Training helpers (transformer_lib.training): the loop core (its steps against a hand-written
loop, its schedule, evaluations, callback, history and mode rule), the warmup-cosine schedule
against torch's schedulers, the causal LM loss, perplexity, AdamW parameter groups, batching,
evaluation and short end-to-end runs of ``fit`` and ``train_lm``."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.training import (History, causal_lm_loss, decay_parameter_groups, evaluate_lm, fit, lm_batch,
                                      make_adamw, perplexity, train_lm, train_loop, warmup_cosine_schedule,
                                      warmup_schedule)


def lr_sequence(scheduler, optimizer, steps):
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def optimizer_at(lr):
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


# -- the schedule ----------------------------------------------------------------------------

@pytest.mark.parametrize("total, min_ratio", [(10, 0.0), (100, 0.0), (100, 0.1), (37, 0.5)])
def test_cosine_without_warmup_equals_torch_cosine_annealing(total, min_ratio):
    # CosineAnnealingLR updates recursively; the closed form agrees to rounding (~1e-16 per step)
    ours_opt, ref_opt = optimizer_at(0.1), optimizer_at(0.1)
    ours = lr_sequence(torch.optim.lr_scheduler.LambdaLR(ours_opt, warmup_cosine_schedule(0, total, min_ratio)),
                       ours_opt, total + 1)
    ref = lr_sequence(torch.optim.lr_scheduler.CosineAnnealingLR(ref_opt, T_max=total, eta_min=0.1 * min_ratio),
                      ref_opt, total + 1)
    assert ours == pytest.approx(ref, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("warmup, total, min_ratio", [(5, 50, 0.1), (20, 100, 0.0), (2, 10, 0.2)])
def test_warmup_then_cosine_equals_torch_linear_then_cosine(warmup, total, min_ratio):
    # LinearLR(start 1/W, total_iters W-1) gives (s+1)/W for s < W: our warmup, written independently
    ours_opt, ref_opt = optimizer_at(0.1), optimizer_at(0.1)
    ours = lr_sequence(torch.optim.lr_scheduler.LambdaLR(ours_opt, warmup_cosine_schedule(warmup, total, min_ratio)),
                       ours_opt, total + 1)
    warm = torch.optim.lr_scheduler.LinearLR(ref_opt, start_factor=1 / warmup, end_factor=1.0, total_iters=warmup - 1)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(ref_opt, T_max=total - warmup, eta_min=0.1 * min_ratio)
    ref = lr_sequence(torch.optim.lr_scheduler.SequentialLR(ref_opt, [warm, cos], milestones=[warmup]),
                      ref_opt, total + 1)
    assert ours == pytest.approx(ref, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 50), st.integers(1, 200), st.floats(0.0, 1.0))
def test_schedule_properties(warmup, extra, min_ratio):
    total = warmup + extra
    f = warmup_cosine_schedule(warmup, total, min_ratio)
    values = [f(s) for s in range(total + 5)]
    assert all(0 < v <= 1 + 1e-12 for v in values[:warmup])
    assert all(min_ratio - 1e-12 <= v <= 1 + 1e-12 for v in values[warmup:])
    assert all(a < b for a, b in zip(values[:warmup], values[1:warmup]))  # rises during warmup
    assert all(a >= b - 1e-12 for a, b in zip(values[warmup:], values[warmup + 1:]))  # then never rises
    assert values[max(warmup - 1, 0)] == pytest.approx(1.0) or warmup == 0
    assert values[total] == pytest.approx(min_ratio) and values[-1] == pytest.approx(min_ratio)


@pytest.mark.parametrize("args", [(10, 10), (-1, 10), (5, 3), (2.0, 10), (0, 10, 1.5), (0, 10, -0.1)])
def test_schedule_bad_input(args):
    with pytest.raises(ValueError):
        warmup_cosine_schedule(*args)


# -- the loss and perplexity -------------------------------------------------------------------

def test_causal_lm_loss_matches_a_loop_over_positions():
    logits, tokens = torch.randn(3, 7, 11), torch.randint(0, 11, (3, 7))
    terms = [-torch.log_softmax(logits[b, t], -1)[tokens[b, t + 1]] for b in range(3) for t in range(6)]
    assert causal_lm_loss(logits, tokens).item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-6)


def test_label_smoothing_is_torch_cross_entropy_with_smoothing():
    logits, tokens = torch.randn(2, 5, 9), torch.randint(0, 9, (2, 5))
    log_p = torch.log_softmax(logits[:, :-1], -1)  # (B, L-1, V)
    nll = -log_p.gather(-1, tokens[:, 1:, None]).squeeze(-1)
    smooth = -log_p.mean(-1)  # cross-entropy with the uniform distribution
    expected = (0.9 * nll + 0.1 * smooth).mean()
    assert causal_lm_loss(logits, tokens, label_smoothing=0.1).item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("logits, tokens", [(torch.randn(2, 5, 9), torch.zeros(2, 4, dtype=torch.long)),
                                            (torch.randn(10, 9), torch.zeros(10, dtype=torch.long)),
                                            (torch.randn(2, 1, 9), torch.zeros(2, 1, dtype=torch.long))])
def test_causal_lm_loss_bad_shapes(logits, tokens):
    with pytest.raises(ValueError):
        causal_lm_loss(logits, tokens)


def test_uniform_prediction_has_perplexity_equal_to_vocab_size():
    loss = causal_lm_loss(torch.zeros(2, 6, 50), torch.randint(0, 50, (2, 6))).item()
    assert loss == pytest.approx(math.log(50), rel=1e-6)
    assert perplexity(loss) == pytest.approx(50, rel=1e-6)


# -- AdamW groups ------------------------------------------------------------------------------

def test_decay_groups_hold_linear_weights_only():
    model = tl.DecoderOnlyLM(40, d_model=16, num_heads=2, num_layers=2, max_len=8)
    decay, no_decay = decay_parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    expected = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) for n in [n + ".weight"]}
    expected.discard("head.weight")  # tied to the embedding, which is not decayed
    assert decayed == expected and decayed
    assert not any("norm" in n or n.endswith("bias") or "embed" in n for n in decayed)
    all_params = list(model.parameters())
    assert len(decay["params"]) + len(no_decay["params"]) == len(all_params)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0


def test_adamw_decays_only_the_decay_group():
    # with zero gradients AdamW's update is the decay alone: w <- w (1 - lr * wd)
    model = tl.DecoderOnlyLM(40, d_model=16, num_heads=2, num_layers=1, max_len=8)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = make_adamw(model, lr=0.5, weight_decay=0.1)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    decayed = {id(p) for p in opt.param_groups[0]["params"]}
    for n, p in model.named_parameters():
        factor = 1 - 0.5 * 0.1 if id(p) in decayed else 1.0
        torch.testing.assert_close(p.detach(), before[n] * factor)


# -- data, evaluation, sampling -----------------------------------------------------------------

def test_lm_batch_windows_are_slices_of_the_stream():
    ids = torch.arange(100)
    batch = lm_batch(ids, 6, 10, torch.Generator().manual_seed(0))
    assert batch.shape == (6, 10)
    assert torch.equal(batch - batch[:, :1], torch.arange(10).expand(6, 10))  # consecutive tokens
    assert int(batch.max()) < 100
    with pytest.raises(ValueError):
        lm_batch(ids, 2, 100)


def test_evaluate_lm_is_the_mean_loss_over_windows():
    model = tl.DecoderOnlyLM(30, d_model=16, num_heads=2, num_layers=1, max_len=8, init_std=0.02)
    ids = torch.randint(0, 30, (8 * 5 + 3,))
    windows = ids[:40].view(5, 8)
    expected = causal_lm_loss(model(windows), windows).item()
    assert evaluate_lm(model, ids, 8, batch_size=2) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError):
        evaluate_lm(model, ids[:5], 8)


def test_train_lm_learns_a_periodic_text():
    torch.manual_seed(0)
    ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6] * 60)
    model = tl.DecoderOnlyLM(10, d_model=32, num_heads=2, num_layers=1, max_len=16, init_std=0.02)
    history = train_lm(model, ids[:400], ids[400:], steps=60, batch_size=8, context=16, lr=1e-2,
                       warmup_steps=5, eval_every=20, progress=False)
    assert history["eval_val"][0] > 2.0  # about ln(10) at initialisation
    assert history["eval_val"][-1] < 0.5  # the period is learned
    assert len(history["loss"]) == len(history["lr"]) == 60 and history["tokens_per_s"] > 0
    assert history["eval_steps"] == [0, 20, 40, 60] and isinstance(history, History) and not model.training
    assert history["lr"][4] == pytest.approx(1e-2) and history["lr"][-1] < 2e-3



def test_train_lm_stop_at_is_the_start_of_the_full_run():
    ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6] * 60)
    runs = []
    for stop_at in (None, 12):
        torch.manual_seed(0)
        model = tl.DecoderOnlyLM(10, d_model=16, num_heads=2, num_layers=1, max_len=16, init_std=0.02, dropout=0.1)
        runs.append(train_lm(model, ids[:400], ids[400:], steps=30, batch_size=4, context=16, warmup_steps=5,
                             eval_every=5, progress=False, stop_at=stop_at))
    full, cut = runs
    assert cut["loss"] == full["loss"][:12] and cut["lr"] == full["lr"][:12]  # the full run's schedule and batches
    assert cut["eval_steps"] == [0, 5, 10, 12] and cut["eval_val"][:3] == full["eval_val"][:3]
    with pytest.raises(ValueError, match="stop_at"):
        train_lm(model, ids[:400], ids[400:], steps=30, context=16, progress=False, stop_at=31)

# -- the loop core ------------------------------------------------------------------------------

def regression(seed=0, dropout=0.0):
    """A small regression task: a 2-layer net and a fixed stream of batches."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(dropout), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    xs = torch.randn(12, 8, 4, generator=g)  # 12 batches of 8 rows
    ys = xs @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])  # a linear target, learned in a few steps
    return net, xs, ys


def test_the_loop_core_equals_a_hand_written_loop_bit_for_bit():
    """The same operations in the same order: zero_grad, forward, backward, clip, step, schedule."""
    net, xs, ys = regression()
    hand = copy.deepcopy(net)
    opt = torch.optim.AdamW(hand.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine_schedule(3, 12, 0.1))
    hand_losses, hand_lrs = [], []
    for s in range(12):
        loss = F.mse_loss(hand(xs[s]), ys[s])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hand.parameters(), 0.5)
        hand_lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        hand_losses.append(loss.item())
    history = train_loop(net, torch.optim.AdamW(net.parameters(), lr=0.05), 12,
                         lambda s: F.mse_loss(net(xs[s]), ys[s]), schedule=warmup_cosine_schedule(3, 12, 0.1),
                         grad_clip=0.5, record_lr=True)
    assert history["loss"] == hand_losses and history["lr"] == hand_lrs
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), hand.parameters()))
    assert hand_losses[-1] < 0.5 * hand_losses[0]  # it trains


def test_the_loop_cores_schedule_is_torchs_cosine_annealing():
    net, xs, ys = regression()
    history = train_loop(net, torch.optim.SGD(net.parameters(), lr=0.1), 10, lambda s: F.mse_loss(net(xs[s]), ys[s]),
                         schedule=warmup_cosine_schedule(0, 10, 0.0), record_lr=True)
    probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    reference = lr_sequence(torch.optim.lr_scheduler.CosineAnnealingLR(probe, T_max=10), probe, 10)
    assert history["lr"] == pytest.approx(reference, rel=1e-12, abs=1e-15)  # closed form vs torch's recursion
    warm = train_loop(net, torch.optim.SGD(net.parameters(), lr=0.1), 6, lambda s: F.mse_loss(net(xs[s]), ys[s]),
                      schedule=warmup_schedule(4), record_lr=True)
    assert warm["lr"] == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1], rel=1e-12)


def test_the_loop_core_calls_evaluations_and_the_callback_and_keeps_the_mode_rule():
    net, xs, ys = regression(dropout=0.2)
    seen = {"step": [], "eval": [], "callback": []}

    def step_fn(s):
        seen["step"].append(net.training)
        return F.mse_loss(net(xs[s]), ys[s])

    def evaluate(n):
        seen["eval"].append((n, net.training))
        return {"eval_steps": n, "eval_loss": F.mse_loss(net(xs[0]), ys[0]).item()}

    def callback(step, history):
        seen["callback"].append((step, len(history["loss"])))

    history = train_loop(net, torch.optim.AdamW(net.parameters(), lr=0.01), 7, step_fn, evaluate=evaluate,
                         eval_every=3, callback=callback)
    assert seen["step"] == [True] * 7 and not net.training  # trains in train mode, left in eval mode
    assert seen["eval"] == [(0, False), (3, False), (6, False), (7, False)]  # evaluations in eval mode
    assert seen["callback"] == [(s, s + 1) for s in range(7)]  # after each step, its loss recorded
    assert sorted(history) == ["eval_loss", "eval_steps", "loss"] and history["eval_steps"] == [0, 3, 6, 7]
    seen["step"].clear()
    train_loop(net, torch.optim.AdamW(net.parameters(), lr=0.01), 2, step_fn, train_mode=False)
    assert seen["step"] == [False, False] and not net.training  # DPO's rule: dropout stays off

    def broken(s):
        raise RuntimeError("a failing step")
    with pytest.raises(RuntimeError):
        train_loop(net.train(), torch.optim.AdamW(net.parameters()), 2, broken)
    assert not net.training  # the rule holds when a step fails too


def test_a_step_that_backpropagates_itself_returns_a_float_and_is_not_backpropagated_again():
    net, xs, ys = regression()
    other = copy.deepcopy(net)

    def accumulate(s):  # two half batches, as gradient accumulation does
        total = 0.0
        for half in (slice(0, 4), slice(4, 8)):
            loss = F.mse_loss(net(xs[s][half]), ys[s][half]) / 2
            loss.backward()
            total += loss.item()
        return total

    a = train_loop(net, torch.optim.SGD(net.parameters(), lr=0.1), 3, accumulate)
    b = train_loop(other, torch.optim.SGD(other.parameters(), lr=0.1), 3, lambda s: F.mse_loss(other(xs[s]), ys[s]))
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
    for p, q in zip(net.parameters(), other.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)  # equal up to the order of float sums


def test_fit_returns_the_history_and_trains():
    net, xs, ys = regression()
    steps = []
    history = fit(net, lambda s: (xs[s], ys[s]), lambda m, b: F.mse_loss(m(b[0]), b[1]), 12, lr=0.05,
                  progress=False, callback=lambda step, h: steps.append(step))
    assert isinstance(history, History) and len(history["loss"]) == 12 and steps == list(range(12))
    assert history["loss"][-1] < 0.5 * history["loss"][0] and not net.training
    with pytest.raises(ValueError, match="steps"):
        train_loop(net, torch.optim.SGD(net.parameters(), lr=0.1), 0, lambda s: None)


# -- the corpus split and the shipped checkpoint (chapter 16) -----------------------------------

def test_paragraph_split_partitions_the_text():
    from transformer_lib.data import load_corpus, split_paragraphs
    text = load_corpus()
    train, val = split_paragraphs(text)
    paragraphs = [p.strip("\n") for p in text.split("\n\n") if p.strip()]
    train_p = [p.strip("\n") for p in train.split("\n\n") if p.strip()]
    val_p = [p.strip("\n") for p in val.split("\n\n") if p.strip()]
    assert val_p == paragraphs[9::10] and len(train_p) + len(val_p) == len(paragraphs)
    assert 0.07 < len(val) / len(text) < 0.13
    with pytest.raises(ValueError):
        split_paragraphs(text, val_every=1)


def test_checkpoint_is_small_and_reproduces_its_recorded_loss():
    import json
    from pathlib import Path

    from transformer_lib.data import GPT_CHECKPOINT, load_corpus, load_gpt_checkpoint, split_paragraphs
    assert GPT_CHECKPOINT.stat().st_size < 5e6
    model, tok, info = load_gpt_checkpoint()
    results = json.loads((Path(__file__).resolve().parents[1] / "benchmarks/results/train_gpt.json").read_text())
    _, val_text = split_paragraphs(load_corpus())
    val_ids = torch.tensor(tok.encode(val_text))
    loss = evaluate_lm(model, val_ids, info["train"]["context"])
    assert loss == pytest.approx(results["main"]["val_loss_float16"], abs=1e-4)
    assert loss < math.log(len(tok)) - 2  # far better than uniform (perplexity < V / e^2)


def test_init_std_default_keeps_torch_init_and_small_init_starts_near_ln_v():
    kw = dict(d_model=32, num_heads=2, num_layers=2, max_len=16)
    torch.manual_seed(0)
    default = tl.DecoderOnlyLM(200, **kw)
    torch.manual_seed(0)
    explicit_none = tl.DecoderOnlyLM(200, init_std=None, **kw)
    for (n, a), (_, b) in zip(default.state_dict().items(), explicit_none.state_dict().items()):
        assert torch.equal(a, b), n
    torch.manual_seed(0)
    small = tl.DecoderOnlyLM(200, init_std=0.02, **kw)
    tokens = torch.randint(0, 200, (4, 16))
    with torch.no_grad():
        assert causal_lm_loss(small(tokens), tokens).item() == pytest.approx(math.log(200), abs=0.05)
        assert causal_lm_loss(default(tokens), tokens).item() > math.log(200) + 1  # N(0, 1) tied embedding
    assert all(not m.bias.detach().any() for m in small.modules()
               if isinstance(m, torch.nn.Linear) and m.bias is not None)


# -- issue #26: bad input of the recipe's helpers ---------------------------------------------------

@pytest.mark.parametrize("call, error, name", [
    (lambda: causal_lm_loss(torch.randn(1, 4, 9), torch.tensor([[1.0, 2.0, 3.0, 4.0]])), ValueError, "integer"),
    (lambda: causal_lm_loss(torch.randn(1, 4, 9), torch.tensor([[1, 2, 9, 4]])), ValueError, r"\[0, 9\)"),
    (lambda: causal_lm_loss(torch.randn(1, 4, 9), torch.tensor([[1, 2, -1, 4]])), ValueError, r"\[0, 9\)"),
    (lambda: causal_lm_loss(torch.randn(1, 4, 9), torch.zeros(1, 4, dtype=torch.long), 1.5), ValueError,
     "label_smoothing"),
    (lambda: lm_batch(torch.arange(100), 0, 8), ValueError, "batch_size"),
    (lambda: lm_batch(torch.arange(100), 4, 1), ValueError, "context"),
    (lambda: lm_batch(torch.arange(5), 4, 8), ValueError, "ids"),
    (lambda: perplexity(float("nan")), ValueError, "loss"),
    (lambda: perplexity(-0.5), ValueError, "loss"),
    (lambda: perplexity("3.2"), TypeError, "loss"),
])
def test_recipe_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_perplexity_of_a_huge_loss_is_inf_not_an_overflow_error():
    assert perplexity(1000.0) == math.inf  # math.exp raised OverflowError
    assert perplexity(torch.tensor(2.0)) == pytest.approx(math.exp(2.0))


@pytest.mark.parametrize("kwargs, name", [({"eval_every": 0}, "eval_every"), ({"steps": 0}, "steps"),
                                          ({"eval_windows": -1}, "eval_windows")])
def test_train_lm_refuses_bad_sizes_before_training(kwargs, name):
    model = tl.DecoderOnlyLM(11, 8, 2, 1, max_len=16)
    before = [p.clone() for p in model.parameters()]
    ids = torch.randint(0, 11, (400,))
    with pytest.raises(ValueError, match=name):
        train_lm(model, ids, ids, **{"steps": 4, "context": 8, "progress": False, **kwargs})
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing trained
