// Render every pymdownx.arithmatex element (generic mode) with the site's own KaTeX.
// arithmatex emits <span class="arithmatex">\(...\)</span> and <div class="arithmatex">\[...\]</div>;
// only those elements are touched, so a "$" or "\(" inside code blocks stays as written.
// A formula KaTeX cannot parse is reported with console.error (the browser test fails on it)
// and left visible as source rather than silently dropped.
(function () {
  "use strict";
  function renderMath(root) {
    root.querySelectorAll(".arithmatex").forEach(function (el) {
      if (el.querySelector(".katex")) return; // already rendered
      var tex = (el.textContent || "").trim();
      var display = tex.startsWith("\\[") && tex.endsWith("\\]");
      var inline = tex.startsWith("\\(") && tex.endsWith("\\)");
      if (!display && !inline) {
        console.error("arithmatex element without \\( \\) or \\[ \\] delimiters: " + tex);
        return;
      }
      try {
        katex.render(tex.slice(2, -2), el, { displayMode: display, throwOnError: true });
      } catch (err) {
        console.error("KaTeX could not render " + JSON.stringify(tex) + ": " + err.message);
      }
    });
  }
  // mkdocs-material exposes document$ (an observable of page loads, including instant
  // navigation); fall back to DOMContentLoaded for any other theme.
  if (typeof document$ !== "undefined") {
    document$.subscribe(function () { renderMath(document.body); });
  } else {
    document.addEventListener("DOMContentLoaded", function () { renderMath(document.body); });
  }
})();
