"""Input checks shared by the whole library: each rule is written once, here.

Every public function or module checks its input once, at the door, and raises a ``ValueError``
that says what was expected; the private cores underneath (``attention._attention``, ...) trust
their input and do not check again. A multi-head call therefore checks its mask once, not once
per layer of helpers it passes through.

The rules live in one module per concept (``scalars``, ``tokens``, ``attention``, ``models``,
``cost``, ``distributed``, ``quantization``, ...); import them from here. This package is the
ground floor: it imports nothing else from ``transformer_lib`` (a model or tokenizer is recognised
by what the check reads from it; tests/test_imports.py holds this), so every module can use it.
"""
from .scalars import check_int, check_probability, check_number, check_bool, check_choice, check_str_list  # noqa: F401
from .tokens import check_tokens, check_token_ids, check_prompt_ids, check_id_list, check_logits, check_positions, check_text, check_chat_messages  # noqa: F401
from .attention import check_floating, check_finite, check_qkv, check_mask, check_square_maps, check_self_attention_qkv, check_key_mask, check_sparse_call, check_positions_list, check_mask_stack, check_dilations, check_block_layout, check_window_key_mask  # noqa: F401
from .models import check_cache, check_cache_layer  # noqa: F401
from .cost import check_sizes, check_trees, check_rho_sigma2, check_lengths, check_heads_divide, check_levels  # noqa: F401
from .distributed import check_distributed_run, check_parallel_split, check_pipeline  # noqa: F401
from .quantization import check_quantization_args, check_matvec_input  # noqa: F401
# the checks of the later chapters' modules, one file each
from .circuits import check_decoder, check_answers, check_prompt_pair, check_index_list, check_heads, check_ablation  # noqa: F401
from .export import check_export_args, check_onnx_path  # noqa: F401
from .finetune import check_labelled_batch, check_training_settings  # noqa: F401
from .kv_cache import check_cache_sizes, check_new_cache  # noqa: F401
from .lora import check_lora_linear, check_add_lora, check_lora_model  # noqa: F401
from .preference import check_sequence_logprobs_args, check_dpo_args, check_scores, check_training_args  # noqa: F401
from .probes import check_module, check_module_names, check_patches, check_block_index, check_head_outputs  # noqa: F401

__all__ = sorted(name for name in dir() if name.startswith("check_"))  # every rule imported above
# issue 39: the raises of the model-side modules moved here (generic tensor rules in scalars)
from .scalars import check_divisible, check_callable, check_tensor, check_features, check_same_batch  # noqa: F401
from .attention import check_causal_lengths, check_same_dtype, check_nonempty_qkv, check_score_bias, check_mha_inputs  # noqa: F401
from .masks import check_bool_mask, check_bool_masks, check_torch_mask, check_sequence_lengths, check_bigbird_blocks, check_layout_to_mask  # noqa: F401
from .layers import check_top_k, check_experts, check_router_logits, check_moe_decoder, check_expert_parallel, check_latent_sizes, check_positions_fit, check_rotary_positions, check_torch_mha, check_torch_layer_norm, check_torch_rnn, check_torch_activation  # noqa: F401
from .attention import check_online_softmax_state, check_scores, check_partial_attention  # noqa: F401
from .models import check_decoder_options, check_context_length  # noqa: F401
from .kv_cache import check_cache_update, check_reorder_index, check_step_times  # noqa: F401
from .circuits import check_final_logits, check_score_values, check_head_sets, check_reference  # noqa: F401
from .scalars import check_generator  # noqa: F401
from .probes import check_block_order, check_in_context, check_loss_curve, check_context, check_score_table  # noqa: F401
from .profiling import check_device, check_timing  # noqa: F401
from .probes import check_patch_value, check_has_attention, check_one_sequence, check_sequence_map, check_classifier_batch, check_lookup_maps  # noqa: F401
from .scalars import check_folder  # noqa: F401
from .export import check_exported  # noqa: F401
