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
# the checks of the text-side modules (tokenizer, decoding, training, tuning, data, figures), one file each
from .tokens import check_id_dtype, check_id, check_decode_ids, check_vocab_id, check_bytes, check_byte_chars, check_merges, check_special_tokens, check_bpe_vocab_size, check_merge_args, check_pair_counts, check_words  # noqa: F401
from .values import check_str, check_path, check_callable, check_instance  # noqa: F401
from .sampling import check_temperature, check_strategy, check_seed, check_decoder_ids, check_prompt_rows, check_fits, check_strategies, check_continuations  # noqa: F401
from .training import check_schedule, check_lm_logits, check_loss, check_token_stream, check_windows, check_trainable  # noqa: F401
from .data import check_chapters_dir, check_paragraph_split, check_checkpoint_path  # noqa: F401
from .plotting import check_description, check_labels, check_weight_map, check_mask_map, check_map_grid  # noqa: F401
from .tasks import check_generator, check_task_vocab, check_src_target, check_one_token, check_equal_lengths  # noqa: F401
from .widgets import check_choice_values, check_control, check_controls, check_static_combinations  # noqa: F401
from .forests import check_features, check_targets, check_same_features, check_two_features, check_train_rows, check_fitted, check_forest_size, check_grown, check_oob_forest  # noqa: F401
from .reasoning import check_characters, check_group_rewards, check_grpo_args, check_reference  # noqa: F401
from .pretrained import check_bert_config, check_model_dir, check_bert_state, check_position_table, check_mask_like, check_embedding_matrix, check_text_list, check_gguf_file, check_rotary_rows, check_bpe_metadata, check_llama_metadata, check_full_rotary, check_tied_head, check_ids_input, check_nonempty_ids, check_chat_template  # noqa: F401

__all__ = sorted(name for name in dir() if name.startswith("check_"))  # every rule imported above
