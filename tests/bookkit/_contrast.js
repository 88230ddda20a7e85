() => {
  // WCAG 2 contrast of each text element against the first opaque background behind it
  const parse = c => { const m = c.match(/[\d.]+/g); if (!m) return null; const v = m.map(Number);
                       return {r: v[0], g: v[1], b: v[2], a: v.length > 3 ? v[3] : 1}; };
  const lum = c => { const f = x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); };
                     return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const bgOf = e => { for (let a = e; a; a = a.parentElement) { const c = parse(getComputedStyle(a).backgroundColor);
                      if (c && c.a > 0.5) return c; }
                      return parse(getComputedStyle(document.body).backgroundColor) || {r: 255, g: 255, b: 255, a: 1}; };
  const ratio = e => { const a = lum(parse(getComputedStyle(e).color)), b = lum(bgOf(e));
                       return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); };
  const sel = ['.tlib-widget b', '.tlib-widget label', '.tlib-widget output', '.tlib-widget .tlib-note',
               '.tlib-widget pre', '.tlib-widget select', '.highlight .c1', '.highlight .c', '.highlight .cm',
               '.highlight .s', '.highlight .s1', '.highlight .s2', '.highlight .sd', '.highlight .k', '.highlight .n',
               '.highlight .mi', '.highlight .mf', '.highlight .o', '.highlight .nb', '.highlight .nf', '.cell_output pre',
               'p', 'li', 'a:not(.headerlink)', 'p.tlib-reference-output'].map(s => 'article ' + s).join(', ');
  const out = [];
  for (const e of document.querySelectorAll(sel)) {
    if (!e.textContent.trim()) continue;
    const r = ratio(e);
    if (r < 4.5) out.push([e.tagName.toLowerCase() + '.' + [...e.classList].join('.'), Math.round(r * 100) / 100,
                           getComputedStyle(e).color, e.textContent.trim().slice(0, 30)]);
  }
  return out;
}
