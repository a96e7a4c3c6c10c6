// Keyboard shortcuts of the annotate page. Everything also works without this file: the buttons are
// plain form submits and the links plain links; this only maps keys to them and times each item.
(function () {
  "use strict";
  let shownAt = performance.now();

  const panel = () => document.getElementById("annotate-panel");
  const openDialog = () => document.querySelector("dialog[open]");
  const typing = (el) => el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));

  function toggleDialog(id) {
    const dialog = document.getElementById(id);
    if (!dialog) return;
    if (dialog.open) dialog.close();
    else {
      const other = openDialog();
      if (other) other.close();
      dialog.showModal();
    }
  }

  function startSkip() {
    const skip = panel() && panel().querySelector("details.skip");
    if (!skip) return;
    if (window.htmx) window.htmx.process(panel());
    skip.open = true;
    const reason = skip.querySelector("input[name=reason]");
    if (reason) reason.focus();
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
    const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
    if (typing(event.target)) {
      if (key === "Escape") {  // leave the skip reason without skipping
        const skip = event.target.closest("details.skip");
        if (skip) { skip.open = false; event.target.blur(); event.preventDefault(); }
      }
      return;
    }
    if (key === "?") { toggleDialog("shortcuts"); event.preventDefault(); return; }
    if (key === "h") { toggleDialog("guidelines"); event.preventDefault(); return; }
    if (openDialog()) return;  // a dialog is up: Esc (native) closes it, label keys do nothing
    if (key === "s") { startSkip(); event.preventDefault(); return; }
    const target = panel() && panel().querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (!target) return;
    // A key pressed within htmx's settle delay after a swap can beat htmx to the new panel; without
    // this the click would fall back to a full page load (correct, but slow).
    if (window.htmx) window.htmx.process(panel());
    target.click();
    event.preventDefault();
  });

  // "h" / "?" links open their dialog; without JS they are ordinary links.
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("[data-dialog]");
    if (link) { event.preventDefault(); toggleDialog(link.dataset.dialog); }
  });

  // Time on item: from the moment the panel showed it to the submit.
  document.addEventListener("htmx:configRequest", (event) => {
    const form = event.detail.elt.closest && event.detail.elt.closest("form.labels");
    if (form) event.detail.parameters["seconds"] = ((performance.now() - shownAt) / 1000).toFixed(2);
  });
  document.addEventListener("htmx:afterSettle", (event) => {
    if (event.target.id === "annotate-panel" || (event.detail && event.detail.elt && event.detail.elt.id === "annotate-panel")) {
      shownAt = performance.now();
    }
  });
})();
