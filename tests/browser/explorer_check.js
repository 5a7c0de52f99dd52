// Injected at the end of the explorer page by tests/test_explorer.py and run by headless Chromium: once the page is
// ready, record what the first screen shows (the top of the aggregates, the source length of each list row in the
// viewport), then scroll to the 81st row and click it as a reader would, and record where the sentence it opens
// lies, as JSON in a PRE element with id rnnsearch-check, which --dump-dom prints.
(() => {
  const pause = ms => new Promise(r => setTimeout(r, ms));
  const box = el => { const r = el.getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; };
  window.addEventListener("load", async () => {
    const report = {error: null, height: window.innerHeight};
    try {
      while (document.body.dataset.state === "loading") await pause(100);
      report.state = document.body.dataset.state;
      report.aggregates_top = box(document.getElementById("aggregates")).top + window.scrollY;
      const rows = [...document.querySelectorAll("#list tbody tr")];
      report.first_screen_words = rows.filter(r => box(r).top < window.innerHeight)
        .map(r => Number(r.cells[1].textContent));
      const row = rows[80];
      row.scrollIntoView({block: "center"});
      await pause(200);
      report.clicked_line = Number(row.dataset.line);
      row.cells[2].dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true, view: window}));
      await pause(1000);
      const heading = document.getElementById("sentence-heading");
      report.heading = heading.hidden ? null : heading.textContent;
      report.heading_box = box(heading);
      report.model_a = document.getElementById("a").value;
      const first = document.querySelector("#sentence table.heatmap");
      report.first_heatmap = first ? first.dataset.model : null;
      report.first_heatmap_box = first ? box(first) : null;
      const totals = first ? [...first.querySelectorAll("tr.total td")] : [];
      report.totals = totals.map(td => Number(td.title));  // each source word's Σ_i α_ij, as the page shows it
      report.total_kinds = totals.map(td => td.className);
      report.word_kinds = first ? [...first.querySelectorAll("th.col")].map(th => th.className.replace("col", "").trim()) : [];
    } catch (e) {
      report.error = String(e);
    }
    rnnsearchCheckDone(report);
  });
})();
