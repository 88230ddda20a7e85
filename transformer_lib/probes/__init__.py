"""Probes: measure what a model does, from the outside, without changing it.

Every probe works on any model built from the library's modules, so each chapter reads its
tables and figures from what the modules did rather than from numbers typed by hand.

* :mod:`.attention`: :func:`record_attention` (every attention call's inputs, mask and weights;
  chapters 2-4, 10, 12-14, 17) and :func:`mask_kind`.
* :mod:`.activations`: :func:`record_activations` and :func:`patch_activations` read and replace
  any module's output by its path (``"blocks.3"``, ``"blocks.3.hook_z"``; the names of every
  decoder's hook points are listed there), :func:`head_contributions` splits the attention's
  output into one term per head (chapters 23, 24).
* :mod:`.scores`: :func:`head_scores` (chapter 3), :func:`diagonal_score`, :func:`column_score`
  and :func:`head_pattern_scores` (chapters 2, 14).
* :mod:`.gradients`: :func:`dependency_map` (chapter 13) and :func:`input_gradient_norms` (chapter 9).
"""
from .activations import HOOK_POINTS, head_contributions, hook_points, patch_activations, record_activations
from .attention import AttentionCall, mask_kind, record_attention
from .gradients import dependency_map, input_gradient_norms
from .scores import column_score, diagonal_score, head_pattern_scores, head_scores

__all__ = ["AttentionCall", "record_attention", "record_activations", "patch_activations", "mask_kind",
           "head_scores", "diagonal_score", "column_score", "head_pattern_scores", "dependency_map",
           "input_gradient_norms", "hook_points", "head_contributions", "HOOK_POINTS"]
