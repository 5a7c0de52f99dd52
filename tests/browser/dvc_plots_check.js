// Injected into the page `dvc plots show` / `dvc plots diff` writes (before </head>, after the inlined Vega) by
// tests/test_workflow.py and run by headless Chromium with no network: every chart is drawn as SVG, and once all
// are drawn the page records, per chart, its title, the line series drawn (one <path> per series of a line mark)
// and its axes' labels, as JSON in a PRE element with id rnnsearch-check, which --dump-dom prints.
(() => {
  const report = {charts: [], error: null, vegaEmbed: typeof window.vegaEmbed};
  const drawn = [];
  const original = window.vegaEmbed;
  if (original) {
    window.vegaEmbed = (el, spec, opts) => {
      const done = original(el, spec, {...(opts || {}), renderer: "svg", actions: false});
      const title = spec.title && (spec.title.text || spec.title);
      drawn.push(done.then(() => ({el, title}), e => ({el, title, error: String(e)})));
      return done;
    };
  }
  window.addEventListener("load", async () => {
    try {
      for (const {el, title, error} of await Promise.all(drawn)) {
        const root = document.querySelector(el);
        report.charts.push({
          title, error,
          lines: root.querySelectorAll("g.mark-line path").length,
          axis_labels: [...root.querySelectorAll("g.role-axis-label text")].map(t => t.textContent),
        });
      }
    } catch (e) {
      report.error = String(e);
    }
    rnnsearchCheckDone(report);
  });
})();
