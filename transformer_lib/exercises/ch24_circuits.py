"""Chapter 24 (A real model's circuits) exercises: the logit-difference metric, the logit lens of
one layer, the normalised patching score. Each checker compares with the library's public
functions (:mod:`transformer_lib.circuits`) on inputs built here."""
import torch

from ..circuits import logit_difference, normalized_score, unembed
from ..model import DecoderOnlyLM
from ..pretrained.llama import LlamaConfig, llama_decoder
from ..probes import patch_activations, record_activations
from ._core import NotYet, compare_arrays, exercise, require_function, seed_cpu, to_number


@exercise("circuits.logit_difference", call="logit_diff(logits, correct, wrong)",
          hint="take the last position, logits[:, -1] (B, V); pick each row's correct and wrong token with "
               "torch.arange(B) as row index; return correct minus wrong, one number per prompt")
def _check_logit_difference(answer):
    require_function(answer, "logit_diff(logits, correct, wrong)")
    seed_cpu(24)
    cases = []
    for B, L, V in ((1, 5, 11), (4, 7, 30), (3, 1, 8)):
        logits = torch.randn(B, L, V) * 3
        correct, wrong = torch.randint(0, V, (B,)), torch.randint(0, V, (B,))
        wrong[0] = (correct[0] + 1) % V
        cases.append((logits, correct, wrong))
    logits = torch.randn(2, 6, 9)
    logits[:, :-1] += 100.0  # earlier positions must not matter
    cases.append((logits, torch.tensor([3, 4]), torch.tensor([4, 3])))  # the same pair, swapped
    for n, (logits, c, w) in enumerate(cases, 1):
        got = answer(logits.clone(), c.clone(), w.clone())
        compare_arrays(got, logit_difference(logits, c, w), what=f"your differences for test batch #{n}", atol=1e-5)
    return f"right on all {len(cases)} batches (one prompt, several, a one-token prompt, swapped answers)."


def _tiny_decoder(seed: int) -> DecoderOnlyLM:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = llama_decoder(LlamaConfig(vocab_size=40, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1,
                                          d_ff=8, context_length=8))
        with torch.no_grad():
            model.norm.weight.copy_(torch.rand(16) * 2 + 0.1)  # a scale that is not all ones
    return model.eval()


@exercise("circuits.logit_lens", call="lens(x, gamma, W_U, eps)",
          hint="RMSNorm first: x / sqrt(mean(x^2 over the last axis) + eps) * gamma; then the logits are "
               "that times W_U transposed (W_U is (V, D), one row per token)")
def _check_logit_lens(answer):
    require_function(answer, "lens(x, gamma, W_U, eps)")
    for n, seed in enumerate((0, 1, 2), 1):
        model = _tiny_decoder(seed)
        seed_cpu(100 + seed)
        x = torch.randn(3, 16) * (1 + 5 * seed)  # residual streams of growing size: the norm must divide it out
        got = answer(x.clone(), model.norm.weight.detach().clone(), model.embed.weight.detach().clone(),
                     model.norm.eps)
        compare_arrays(got, unembed(model, x), what=f"your logits for test model #{n}", atol=1e-4)
    return "matches the model's own final norm and unembedding on all 3 test models."


@exercise("circuits.normalized_score", call="score(patched, clean, corrupted)",
          hint="how far the patched value has moved from the corrupted one, as a fraction of the whole way "
               "from corrupted to clean: (patched - corrupted) / (clean - corrupted)")
def _check_normalized_score(answer):
    require_function(answer, "score(patched, clean, corrupted)")
    cases = [(4.0, 4.0, -3.0), (-3.0, 4.0, -3.0), (0.5, 4.0, -3.0), (6.0, 4.0, -3.0), (-5.0, 4.0, -3.0),
             (1.0, 2.0, 0.5), (-2.0, -1.0, -4.0)]
    for patched, clean, corrupted in cases:
        got = answer(patched, clean, corrupted)
        want = normalized_score(patched, clean, corrupted)
        if abs(to_number(got, "your score") - want) > 1e-6:
            raise NotYet(f"patched {patched}, clean {clean}, corrupted {corrupted}: your score is off "
                         "(clean should give 1, corrupted 0)")
    return f"right on all {len(cases)} cases, including scores above 1 and below 0."


def _patching_model(seed: int) -> DecoderOnlyLM:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = llama_decoder(LlamaConfig(vocab_size=30, d_model=24, num_layers=2, num_heads=3, num_kv_heads=1,
                                          d_ff=16, context_length=10))
    return model.eval()


@exercise("circuits.patch_head", call="patch_head(model, clean, corrupted, layer, head, correct, wrong)",
          hint="run the clean prompts inside record_activations(model, [f'blocks.{layer}.hook_z']) to keep z "
               "(B, L, H, d_head); then run the corrupted prompts inside patch_activations with a function that "
               "clones z and copies the clean z[:, :, head] into it (every position, that head only); return "
               "the logit difference of that run at the last position, one number per prompt")
def _check_patch_head(answer):
    require_function(answer, "patch_head(model, clean, corrupted, layer, head, correct, wrong)")
    cases = []
    for n, (seed, layer, head) in enumerate(((0, 0, 1), (1, 0, 2), (2, 1, 0), (3, 0, 0)), 1):
        model = _patching_model(seed)
        seed_cpu(200 + seed)
        clean = torch.randint(0, 30, (4, 7))
        corrupted = clean.clone()
        corrupted[:, 3] = (clean[:, 3] + 1 + torch.randint(0, 28, (4,))) % 30  # one token differs
        correct, wrong = torch.randint(0, 30, (4,)), torch.randint(0, 30, (4,))
        # the reference, written in the checker (a function of the package must not pass an exercise)
        name = f"blocks.{layer}.hook_z"
        with torch.no_grad():
            with record_activations(model, [name]) as seen:
                model(clean)
            source = seen[name]  # (B, L, H, d_head)
            with patch_activations(model, {name: lambda z: torch.cat(
                    [z[:, :, :head], source[:, :, head:head + 1], z[:, :, head + 1:]], dim=2)}):
                want = logit_difference(model(corrupted), correct, wrong)  # (B,)
        with torch.no_grad():
            got = answer(model, clean.clone(), corrupted.clone(), layer, head, correct.clone(), wrong.clone())
        compare_arrays(got, want, what=f"your logit differences for test model #{n} (block {layer}, head {head})",
                       atol=1e-4)
        cases.append(n)
    return (f"right on all {len(cases)} test models: the corrupted run with one clean head put back, "
            "in either block.")
