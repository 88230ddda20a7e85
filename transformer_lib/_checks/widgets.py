"""Interactive explorers (transformer_lib.widgets): controls, their values and defaults."""
from __future__ import annotations


def check_choice_values(values: list, value=None) -> None:
    """A Choice's values: at least one; its default (once chosen) one of them."""
    if not values:
        raise ValueError("a Choice needs at least one value")
    if value is not None and value not in values:
        raise ValueError(f"default {value!r} is not one of the values {values!r}")


def check_control(spec, control_types: tuple) -> None:
    """One control: a list, tuple or range of values, or an instance of ``control_types`` (Choice, Text)."""
    if not isinstance(spec, (*control_types, list, tuple, range)):
        raise ValueError(f"a control must be a list of values, a Choice or a Text, got {spec!r}")


def check_controls(controls: dict) -> None:
    """An explorer needs at least one control."""
    if not controls:
        raise ValueError("explore needs at least one control, e.g. explore(fn, n=[1, 2, 3])")


def check_static_combinations(count: int, limit: int) -> None:
    """The static book precomputes every combination of the controls' values: at most ``limit``."""
    if count > limit:
        raise ValueError(f"{count} combinations is too many to precompute for the static book "
                         f"(at most {limit}); use fewer values per control")
