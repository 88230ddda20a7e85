/* Transformers, Interactively: a display equation wider than its column is scaled down to fit.
   MathJax 3 has no automatic line breaking, and a formula that scrolls sideways (or is clipped on a
   printed page) cannot be read whole. MathJax's CHTML output is sized in em, so a smaller font size
   on the container scales the whole formula. Runs after MathJax has typeset the page, when the
   window is resized, and before printing (bookkit.pdf calls window.tlibFitMath() itself). */
(function () {
  var MIN_SCALE = 0.55;  // below this the formula is too small to read: it scrolls instead
  function fit() {
    document.querySelectorAll('article mjx-container[display="true"]').forEach(function (c) {
      c.style.fontSize = '';
      c.classList.remove('tlib-fitted');
      var math = c.querySelector('mjx-math');
      var room = c.clientWidth, need = math ? math.getBoundingClientRect().width : 0;
      if (room > 0 && need > room + 0.5) {
        var scale = Math.max(MIN_SCALE, Math.floor(room / need * 100) / 100);
        c.style.fontSize = (scale * 100) + '%';
        c.classList.add('tlib-fitted');
      }
    });
  }
  window.tlibFitMath = fit;
  function start() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(fit);
    } else {
      setTimeout(start, 100);
    }
  }
  var timer = null;
  window.addEventListener('resize', function () { clearTimeout(timer); timer = setTimeout(fit, 150); });
  window.addEventListener('beforeprint', fit);
  window.addEventListener('afterprint', fit);
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
