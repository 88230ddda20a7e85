"""Chapter 23 (Induction heads) exercises: the previous-token score, the induction (prefix-
matching) score, the K-composition score and a per-position mean ablation through ``hook_z``. Each checker compares with the library's public
functions (:mod:`transformer_lib.induction`) on small random patterns and weights."""
import torch

from ..induction import head_weights, induction_scores, k_composition_scores, previous_token_scores
from ..model import DecoderOnlyLM
from ._core import NotYet, compare_function, exercise, seed_cpu, to_number


def _patterns():
    """Causal attention patterns (H, L, L) of a few sizes, rows summing to one."""
    g = torch.Generator().manual_seed(23)
    out = []
    for H, L in ((1, 4), (3, 8), (4, 12)):
        scores = torch.randn(H, L, L, generator=g) * 3
        scores = scores.masked_fill(~torch.tril(torch.ones(L, L, dtype=torch.bool)), float("-inf"))
        out.append(torch.softmax(scores, dim=-1))  # (H, L, L)
    return out


@exercise("induction.previous_token_score", call="previous_token_score(pattern)",
          hint="query i's weight on key i - 1 is pattern[:, i, i - 1]: torch.diagonal(pattern, offset=-1, "
               "dim1=-2, dim2=-1) gives them for i = 1 .. L-1; average them per head")
def _check_previous_token(answer):
    return compare_function(answer, lambda p: previous_token_scores(p[None]), [(p,) for p in _patterns()],
                            what="previous-token scores (H,)")


@exercise("induction.induction_score", call="induction_score(pattern, half)",
          hint="for a query i >= half the earlier copy of its token sits at i - half, and the token after "
               "it at i - half + 1: average pattern[:, i, i - half + 1] over i = half .. L-1, per head")
def _check_induction(answer):
    inputs = [(p, p.shape[-1] // 2) for p in _patterns()] + [(_patterns()[2], 5)]
    return compare_function(answer, lambda p, half: induction_scores(p[None], half), inputs,
                            what="induction scores (H,)")


def _composition_inputs():
    seed_cpu(231)
    model = DecoderOnlyLM(11, 16, 4, 2, max_len=8, ffn=False).eval()
    ov, qk = head_weights(model, 0)["W_OV"], head_weights(model, 1)["W_QK"]  # (H, D, D) each
    scores = k_composition_scores(model, 0, 1)  # (H, H)
    return [((ov[a], qk[b]), scores[a, b]) for a, b in ((0, 0), (1, 3), (3, 2))] + \
        [((torch.eye(16), torch.eye(16)), torch.tensor(1 / 16 ** 0.5))]


@exercise("induction.k_composition", call="k_composition(W_OV, W_QK)",
          hint="the keys read W_OV's output through W_QK^T: score = ||W_OV @ W_QK.T||_F / "
               "(||W_OV||_F ||W_QK||_F), torch.linalg.norm gives the Frobenius norm of a matrix")
def _check_k_composition(answer):
    cases = _composition_inputs()
    expected = [c[1] for c in cases]
    return compare_function(answer, expected, [c[0] for c in cases], what="K-composition score", atol=1e-4)


@exercise("induction.position_mean_ablation", call="ablated_loss(model, tokens, in_context, layer, head)",
          hint="inside patch_activations(model, {f'blocks.{layer}.hook_z': f}), f receives z (B, L, H, d_head): "
               "clone it, set z[:, :, head] to its mean over the batch (dim 0, keepdim=True), return it; then "
               "run the model and return induction.in_context_loss(logits, tokens, in_context)")
def _check_position_mean_ablation(answer):
    from ..ablation import ablated_logits
    from ..induction import in_context_loss, repeated_random_tokens
    cases = 0
    for seed, layer, head in ((0, 0, 1), (1, 1, 2), (2, 1, 0)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = DecoderOnlyLM(16, 16, 4, 2, max_len=12, ffn=False, positional="rope").eval()
        tokens, in_context = repeated_random_tokens(8, 12, 16, None, torch.Generator().manual_seed(seed))
        with torch.no_grad():  # the library's mean ablation: the head's batch mean at each position
            want = float(in_context_loss(ablated_logits(model, tokens, [(layer, head)], how="mean"), tokens, in_context))
        with torch.no_grad():
            got = to_number(answer(model, tokens.clone(), in_context.clone(), layer, head), "your loss")
        if abs(got - want) > 1e-4:
            raise NotYet(f"test model #{seed + 1} (block {layer}, head {head}): your loss {got:.4f} is not the "
                         "in-context loss with that head's output replaced by its batch mean at each position")
        cases += 1
    return f"right on all {cases} test models: the head's mean kept at each position, the rest of the run as it was."
