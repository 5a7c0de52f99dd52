// Injected at the end of Snakemake's HTML report by tests/test_workflow.py and run by headless Chromium: on the page
// the report opens on (workflow/report/workflow.rst: Tables 1 and 2, beside Snakemake's rule graph), scroll the
// content to its top and record the boxes of the title, of each table and of the rule graph, as JSON in a PRE
// element with id rnnsearch-check, which --dump-dom prints.
(() => {
  const pause = ms => new Promise(r => setTimeout(r, ms));
  const box = el => { const r = el.getBoundingClientRect(); return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
  window.addEventListener("load", async () => {
    const report = {error: null, width: window.innerWidth, height: window.innerHeight};
    try {
      await pause(1500);
      for (const el of document.querySelectorAll("#app *")) if (el.scrollTop) el.scrollTop = 0;
      window.scrollTo(0, 0);
      await pause(300);
      const prose = document.querySelector("#app .prose");
      const title = prose.querySelector("h1");
      report.title = title ? title.textContent : null;
      report.title_box = title ? box(title) : null;
      report.tables = [...prose.querySelectorAll("table")].map(box);
      const graph = document.querySelector("#rulegraph");
      report.graph = graph ? box(graph) : null;
    } catch (e) {
      report.error = String(e);
    }
    rnnsearchCheckDone(report);
  });
})();
