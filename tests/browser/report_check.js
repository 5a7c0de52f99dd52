// Injected at the end of Snakemake's HTML report by tests/test_workflow.py and run by headless Chromium:
// open every result of every category with its "eye" button, as a reader would, and record what the page
// then shows (each <img> and whether it decoded), and the text of the page it opens on, as JSON in a PRE element with id rnnsearch-check, appended
// to the body, which --dump-dom prints. CATEGORIES (the report categories to open) is defined by the caller.
(() => {
  const pause = ms => new Promise(r => setTimeout(r, ms));
  const byText = text => {
    const all = [...document.querySelectorAll("#app *")].filter(e => e.textContent.trim() === text);
    return all[all.length - 1];
  };
  const click = el => el.dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true, view: window}));
  window.addEventListener("load", async () => {
    const report = {categories: {}, shown: {}, error: null};
    try {
    await pause(1000);
    report.landing = document.querySelector("#app").innerText.slice(0, 20000);  // what the report opens on
    for (const category of CATEGORIES) {
      const results = byText("Results");  // back to the list of categories
      if (results) click(results);
      await pause(800);
      const link = byText(category);
      report.categories[category] = !!link;
      if (!link) continue;
      click(link);
      await pause(1000);
      const rows = [...document.querySelectorAll("#app tr")].filter(r => r.querySelector("a[iconname=eye]"));
      const names = rows.map(r => r.cells[0].textContent.trim());
      for (const name of names) {
        const row = [...document.querySelectorAll("#app tr")].find(r => r.cells[0] && r.cells[0].textContent.trim() === name);
        click(row.querySelector("a[iconname=eye]"));
        await pause(1500);
        const images = [...document.querySelectorAll("#app img")].filter(i => !i.src.startsWith("data:image/svg"));
        report.shown[name] = {
          images: images.map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
          text: document.querySelector("#app").innerText.slice(0, 400),
        };
        const back = byText(category);  // return to the category's list
        if (back) click(back);
        await pause(800);
      }
    }
    } catch (e) {
      report.error = String(e);
    }
    rnnsearchCheckDone(report);
  });
})();
