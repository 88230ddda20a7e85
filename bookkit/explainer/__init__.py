"""The explainer page: the chapter-16 GPT running in the static book (see build.py)."""
