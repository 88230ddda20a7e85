"""The explainer page: the chapter-16 GPT running in the static book (see build.py)."""

# The edit-to-candidates timer, run in the page by the browser test and benchmarks/explainer.py:
# n edits (a short text, or with ``long`` one near the 64-token context); returns the times in ms
# from each input event to the candidate list holding that text's candidates, and the token count.
EDITS_JS = """async ([n, long]) => {
  const input = document.getElementById('explainer-input'), next = document.getElementById('explainer-next');
  const out = [], base = long ? 'the attention of a head is a weighted average of the values '.repeat(6) : 'The attention of a';
  for (let i = 0; i < n; i++) {
    const text = base + ' head'.repeat(i % 5) + (i % 2 ? ' is' : ' was');
    const t0 = performance.now();
    input.value = text;
    input.dispatchEvent(new Event('input'));
    while (next.dataset.text !== text) await new Promise(r => setTimeout(r, 0));
    out.push(performance.now() - t0);
  }
  return [out, window.explainer.ids.length];
}"""
