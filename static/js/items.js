// The item browser: a "select the page" box over the row boxes. Without this file each row is ticked
// by hand (or "select all matching" takes every matching item).
(function () {
  "use strict";
  function wire() {
    const all = document.getElementById("select-page");
    if (!all || all.dataset.wired) return;
    all.dataset.wired = "1";
    all.hidden = false;
    all.addEventListener("change", () => {
      for (const box of document.querySelectorAll("#bulk-form input[name=items]")) box.checked = all.checked;
    });
  }
  document.addEventListener("htmx:afterSettle", wire);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wire);
  else wire();
})();
