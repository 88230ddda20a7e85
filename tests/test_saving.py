"""save_pretrained / from_pretrained: the configuration and weights round trip exactly."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from transformer_lib import DecoderOnlyLM
from transformer_lib.data import load_gpt_checkpoint
from transformer_lib.lora import add_lora
from transformer_lib.quantization import quantize
from transformer_lib.saving import CONFIG_FILE, WEIGHTS_FILE, from_pretrained, save_pretrained


def test_the_book_gpt_of_chapter_16_saves_and_loads_with_equal_logits(tmp_path):
    model, tok, _ = load_gpt_checkpoint()
    save_pretrained(model, tmp_path)
    again = from_pretrained(tmp_path)
    ids = torch.tensor([tok.encode("Attention is a weighted average of the values.")])
    with torch.no_grad():
        assert torch.equal(again(ids), model(ids))
    assert again.config == model.config and again.head.weight is again.embed.weight


def test_the_files_are_a_config_json_and_safetensors_with_the_tied_head_once(tmp_path):
    model = DecoderOnlyLM(37, 32, 4, 2, positional="rope", num_kv_heads=2)
    save_pretrained(model, tmp_path)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert config["positional"] == "rope" and config["num_kv_heads"] == 2
    tensors = load_file(str(tmp_path / WEIGHTS_FILE))
    assert "head.weight" not in tensors and "embed.weight" in tensors


def test_an_untied_head_is_saved_on_its_own(tmp_path):
    torch.manual_seed(0)
    model = DecoderOnlyLM(37, 32, 4, 1, tie_weights=False).eval()
    save_pretrained(model, tmp_path)
    again = from_pretrained(tmp_path)
    assert torch.equal(again.head.weight, model.head.weight) and again.head.weight is not again.embed.weight


def test_a_model_with_unmerged_adapters_is_refused_by_name(tmp_path):
    model = DecoderOnlyLM(37, 32, 4, 1)
    add_lora(model, rank=2, alpha=4.0, targets=["q_proj"])
    with pytest.raises(ValueError, match="model: .*extra .*lora"):
        save_pretrained(model, tmp_path)


def test_a_quantized_model_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="model: .*quantize after loading"):
        save_pretrained(quantize(DecoderOnlyLM(37, 32, 4, 1), 8), tmp_path)


@pytest.mark.parametrize("write, message", [
    (lambda d: None, "no config.json"),
    (lambda d: (d / CONFIG_FILE).write_text('{"vocab_size": 5}'), "no model.safetensors"),
])
def test_bad_folders(tmp_path, write, message):
    write(tmp_path)
    with pytest.raises(ValueError, match=f"folder: .*{message}"):
        from_pretrained(tmp_path)


def test_a_file_of_another_format_is_refused(tmp_path):
    save_pretrained(DecoderOnlyLM(37, 32, 4, 1), tmp_path)
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"format": "other", "vocab_size": 37}))
    with pytest.raises(ValueError, match="folder: .*does not describe a model"):
        from_pretrained(tmp_path)


def test_only_a_decoder_only_lm_is_saved(tmp_path):
    with pytest.raises(TypeError, match="model"):
        save_pretrained(torch.nn.Linear(2, 2), tmp_path)


@pytest.mark.parametrize("switches", [{}, dict(positional="rope", num_kv_heads=2, norm="rms", activation="swiglu",
                                               bias=False, norm_first=True), dict(positional="learned", dropout=0.1)])
def test_an_encoder_decoder_round_trips_with_its_switches(switches, tmp_path):
    from transformer_lib import Seq2SeqTransformer
    torch.manual_seed(0)
    model = Seq2SeqTransformer(13, 17, d_model=32, num_heads=4, d_ff=64, **switches).eval()
    save_pretrained(model, tmp_path)
    again = from_pretrained(tmp_path)
    src, tgt = torch.randint(0, 13, (2, 7)), torch.randint(0, 17, (2, 5))
    with torch.no_grad():
        assert torch.equal(again(src, tgt), model(src, tgt))
    assert again.config == model.config
