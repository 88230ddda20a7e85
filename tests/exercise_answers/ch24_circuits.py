"""Answers for the checkers of transformer_lib/exercises/ch24_circuits.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch


def logit_diff_reference(logits, correct, wrong):
    last = logits[:, -1]  # (B, V)
    rows = torch.arange(last.shape[0])
    return last[rows, correct] - last[rows, wrong]


def _logit_diff_gather(logits, correct, wrong):
    last = logits[:, -1]
    return (last.gather(1, correct[:, None]) - last.gather(1, wrong[:, None])).squeeze(1)


def _logit_diff_loop(logits, correct, wrong):
    return [float(logits[b, -1, int(correct[b])] - logits[b, -1, int(wrong[b])]) for b in range(logits.shape[0])]


def _logit_diff_first_position(logits, correct, wrong):
    rows = torch.arange(logits.shape[0])
    return logits[rows, 0, correct] - logits[rows, 0, wrong]


def _logit_diff_swapped(logits, correct, wrong):
    return -logit_diff_reference(logits, correct, wrong)


def _logit_diff_probabilities(logits, correct, wrong):
    p = logits[:, -1].softmax(-1)
    rows = torch.arange(p.shape[0])
    return p[rows, correct] - p[rows, wrong]


def _logit_diff_cross_rows(logits, correct, wrong):  # every row against every answer: (B, B)
    last = logits[:, -1]
    return last[:, correct] - last[:, wrong]


def _logit_diff_log_probs(logits, correct, wrong):  # log-softmax keeps the difference: right
    lp = logits[:, -1].log_softmax(-1)
    rows = torch.arange(lp.shape[0])
    return lp[rows, correct] - lp[rows, wrong]


def lens_reference(x, gamma, W_U, eps):
    normed = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma
    return normed @ W_U.T


def _lens_numpy(x, gamma, W_U, eps):
    a = x.numpy().astype(np.float64)
    return (a / np.sqrt((a ** 2).mean(-1, keepdims=True) + eps) * gamma.numpy()) @ W_U.numpy().T


def _lens_torch_rmsnorm(x, gamma, W_U, eps):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), gamma, eps) @ W_U.T


def _lens_no_norm(x, gamma, W_U, eps):
    return x @ W_U.T


def _lens_no_gamma(x, gamma, W_U, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) @ W_U.T


def _lens_layernorm(x, gamma, W_U, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, None, eps) @ W_U.T


def _lens_sum_not_mean(x, gamma, W_U, eps):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * gamma @ W_U.T


def _lens_softmax(x, gamma, W_U, eps):
    return lens_reference(x, gamma, W_U, eps).softmax(-1)


def score_reference(patched, clean, corrupted):
    return (patched - corrupted) / (clean - corrupted)


ANSWERS = {
    "circuits.logit_difference": {
        "solution": lambda: logit_diff_reference,
        "alternatives": lambda: [_logit_diff_gather, _logit_diff_loop, _logit_diff_log_probs],
        "wrong": lambda: [_logit_diff_first_position, _logit_diff_swapped, _logit_diff_probabilities,
                          _logit_diff_cross_rows, lambda lg, c, w: lg[:, -1].max(-1).values - lg[:, -1, 0]],
    },
    "circuits.logit_lens": {
        "solution": lambda: lens_reference,
        "alternatives": lambda: [_lens_numpy, _lens_torch_rmsnorm],
        "wrong": lambda: [_lens_no_norm, _lens_no_gamma, _lens_layernorm, _lens_sum_not_mean, _lens_softmax],
    },
    "circuits.normalized_score": {
        "solution": lambda: score_reference,
        "alternatives": lambda: [lambda p, c, r: np.float64(p - r) / np.float64(c - r),
                                 lambda p, c, r: torch.tensor((p - r) / (c - r)),
                                 lambda p, c, r: 1 - (c - p) / (c - r)],
        "wrong": lambda: [lambda p, c, r: (p - c) / (c - r),  # 0 at clean
                          lambda p, c, r: p / c,  # ignores the corrupted run
                          lambda p, c, r: (p - r) / abs(c),
                          lambda p, c, r: min(max((p - r) / (c - r), 0.0), 1.0),  # clipped
                          lambda p, c, r: (c - p) / (c - r)],  # 1 - score
    },
}


def _patch_setup(model, clean, layer):
    from transformer_lib.probes import record_activations
    name = f"blocks.{layer}.hook_z"
    with torch.no_grad(), record_activations(model, [name]) as seen:
        model(clean)
    return name, seen[name]


def patch_head_reference(model, clean, corrupted, layer, head, correct, wrong):
    from transformer_lib.probes import patch_activations
    name, source = _patch_setup(model, clean, layer)

    def put_back(z):
        z = z.clone()
        z[:, :, head] = source[:, :, head]
        return z

    with torch.no_grad(), patch_activations(model, {name: put_back}):
        return logit_diff_reference(model(corrupted), correct, wrong)


def _patch_head_where(model, clean, corrupted, layer, head, correct, wrong):  # a mask instead of an index
    from transformer_lib.probes import patch_activations
    name, source = _patch_setup(model, clean, layer)
    keep = torch.zeros(source.shape[2], dtype=torch.bool)
    keep[head] = True
    with torch.no_grad(), patch_activations(model, {name: lambda z: torch.where(keep[:, None], source, z)}):
        return logit_diff_reference(model(corrupted), correct, wrong)


def _patch_head_variant(how):
    def patch(model, clean, corrupted, layer, head, correct, wrong):
        from transformer_lib.probes import patch_activations
        src_tokens, run_tokens = (corrupted, clean) if how == "noising" else (clean, corrupted)
        name, source = _patch_setup(model, src_tokens, layer)
        heads = slice(None) if how == "all_heads" else (head + 1) % source.shape[2] if how == "wrong_head" else head

        def put_back(z):
            z = z.clone()
            if how == "last_position":
                z[:, -1, heads] = source[:, -1, heads]
            else:
                z[:, :, heads] = source[:, :, heads]
            return z

        with torch.no_grad(), patch_activations(model, {name: put_back}):
            diff = logit_diff_reference(model(run_tokens), correct, wrong)
        if how == "score":  # normalised instead of the raw difference
            with torch.no_grad():
                c = logit_diff_reference(model(clean), correct, wrong)
                r = logit_diff_reference(model(corrupted), correct, wrong)
            return (diff - r) / (c - r)
        return diff
    return patch


def _patch_head_none(model, clean, corrupted, layer, head, correct, wrong):  # the corrupted run itself
    with torch.no_grad():
        return logit_diff_reference(model(corrupted), correct, wrong)


ANSWERS["circuits.patch_head"] = {
    "solution": lambda: patch_head_reference,
    "alternatives": lambda: [_patch_head_where],
    "wrong": lambda: [_patch_head_variant("noising"), _patch_head_variant("all_heads"),
                      _patch_head_variant("wrong_head"), _patch_head_variant("last_position"),
                      _patch_head_variant("score"), _patch_head_none],
}
