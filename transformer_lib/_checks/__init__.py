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
from .scalars import check_int, check_probability, check_number, check_bool, check_choice, check_str_list, check_divisible, check_generator, check_folder, check_callable, check_str, check_path, check_instance, check_tensor, check_features, check_same_batch  # noqa: F401
from .tokens import check_id_dtype, check_tokens, check_token_ids, check_prompt_ids, check_id_list, check_logits, check_positions, check_text, check_chat_messages, check_id, check_decode_ids, check_vocab_id, check_bytes, check_byte_chars, check_merges, check_special_tokens, check_bpe_vocab_size, check_merge_args, check_pair_counts, check_words  # noqa: F401
from .attention import check_floating, check_finite, check_qkv, check_mask, check_score_bias, check_causal_lengths, check_same_dtype, check_nonempty_qkv, check_mha_inputs, check_online_softmax_state, check_softmax_scores, check_partial_attention, check_square_maps, check_self_attention_qkv, check_key_mask, check_mask_stack, check_dilations, check_block_layout, check_window_key_mask, check_sparse_call, check_positions_list  # noqa: F401
from .masks import check_bool_mask, check_bool_masks, check_torch_mask, check_sequence_lengths, check_bigbird_blocks, check_layout_to_mask  # noqa: F401
from .layers import check_top_k, check_experts, check_router_logits, check_moe_decoder, check_expert_parallel, check_latent_sizes, check_latent_call, check_positions_fit, check_rotary_positions, check_torch_mha, check_torch_layer_norm, check_torch_rnn, check_torch_activation  # noqa: F401
from .models import check_cache, check_cache_layer, check_decoder_options, check_context_length  # noqa: F401
from .kv_cache import check_cache_sizes, check_new_cache, check_cache_update, check_reorder_index, check_step_times  # noqa: F401
from .cost import check_sizes, check_lengths, check_heads_divide, check_levels, check_trees, check_rho_sigma2  # noqa: F401
from .profiling import check_device, check_timing  # noqa: F401
from .distributed import check_distributed_run, check_parallel_split, check_pipeline  # noqa: F401
from .quantization import check_quantization_args, check_matvec_input, check_activations, check_matmul_args, check_quantized_linear_args, check_widths, check_max_path, check_kernel_path, check_calibration, check_hessian  # noqa: F401
from .sampling import check_temperature, check_strategy, check_seed, check_decoder_ids, check_prompt_rows, check_fits, check_strategies, check_continuations  # noqa: F401
from .speculative import check_distribution_rows, check_verify_args, check_residual_args, check_draft, check_proposal, check_one_row, check_same_vocabulary, check_ngram_sizes, check_shallow_exit, check_rates  # noqa: F401
from .training import check_schedule, check_lm_logits, check_loss, check_token_stream, check_windows, check_trainable  # noqa: F401
from .tasks import check_task_vocab, check_src_target, check_one_token, check_equal_lengths  # noqa: F401
from .data import check_chapters_dir, check_paragraph_split, check_checkpoint_path  # noqa: F401
from .plotting import check_description, check_labels, check_weight_map, check_mask_map, check_map_grid  # noqa: F401
from .widgets import check_choice_values, check_control, check_controls, check_static_combinations  # noqa: F401
from .export import check_export_args, check_onnx_path, check_exported  # noqa: F401
from .probes import check_module, check_module_names, check_patches, check_block_index, check_head_outputs, check_block_order, check_in_context, check_loss_curve, check_context, check_score_table, check_patch_value, check_has_attention, check_one_sequence, check_sequence_map, check_classifier_batch, check_lookup_maps  # noqa: F401
from .circuits import check_decoder, check_answers, check_prompt_pair, check_index_list, check_heads, check_ablation, check_final_logits, check_score_values, check_head_sets, check_reference  # noqa: F401
from .finetune import check_labelled_batch, check_training_settings, check_head_args, check_start_layer, check_class_scores, check_rank_pair, check_embedding_pair  # noqa: F401
from .lora import check_lora_linear, check_add_lora, check_lora_model, check_chat_texts, check_tokens_and_mask, check_answer_loss, check_template_prefix, check_examples, check_micro_batches, check_targets_found, check_has_adapters, check_adapter_record, check_adapter_targets, check_adapters_match, check_adapter_shape  # noqa: F401
from .preference import check_sequence_logprobs_args, check_dpo_args, check_scores, check_training_args, check_letter, check_paired_scores, check_sentence_prompts, check_pair_sampling, check_judged  # noqa: F401
from .reasoning import check_characters, check_group_rewards, check_grpo_args, check_kl_reference  # noqa: F401
from .pretrained import check_bert_config, check_model_dir, check_bert_state, check_position_table, check_mask_like, check_embedding_matrix, check_text_list, check_gguf_file, check_rotary_rows, check_bpe_metadata, check_llama_metadata, check_full_rotary, check_tied_head, check_ids_input, check_nonempty_ids, check_chat_template  # noqa: F401
from .evaluation import check_choice_item, check_encode, check_outcomes, check_real_values, check_confidences, check_ngram_size  # noqa: F401
from .forests import check_feature_matrix, check_targets, check_same_features, check_two_features, check_train_rows, check_fitted, check_forest_size, check_grown, check_oob_forest  # noqa: F401
from .scaling import check_countable_config, check_positive_array, check_grid  # noqa: F401
from .serving import check_offset, check_prompt_list, check_ragged_model, check_block_pool, check_sequence_id, check_active_rows, check_row_lengths, check_workload_args, check_scheduler_args  # noqa: F401

__all__ = sorted(name for name in dir() if name.startswith("check_"))  # every rule imported above
