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

  // The label search (projects with more than nine labels): a combobox over the labels without a
  // key. Without this file the form shows a plain select instead.
  const MAX_MATCHES = 8;  // a phone screen's worth; typing more narrows it
  const search = () => document.getElementById("label-search");

  function enhanceSearch() {
    const form = panel() && panel().querySelector("form.label-more");
    if (!form || form.dataset.enhanced) return;
    form.dataset.enhanced = "1";
    form.querySelector(".label-search").hidden = false;
    form.querySelector(".label-select").hidden = true;
  }

  function matches() {
    return [...document.querySelectorAll("#label-options [role=option]")].filter((o) => !o.hidden);
  }

  function setActive(option) {
    const input = search();
    for (const o of document.querySelectorAll("#label-options [role=option]")) {
      o.setAttribute("aria-selected", o === option ? "true" : "false");
    }
    if (option) { input.setAttribute("aria-activedescendant", option.id); option.scrollIntoView({ block: "nearest" }); }
    else input.removeAttribute("aria-activedescendant");
  }

  function filterOptions() {
    const input = search();
    const list = document.getElementById("label-options");
    const text = input.value.trim().toLowerCase();
    let shown = 0;
    for (const o of list.querySelectorAll("[role=option]")) {
      o.hidden = !text || shown >= MAX_MATCHES || !o.textContent.toLowerCase().includes(text);
      if (!o.hidden) shown += 1;
    }
    list.hidden = shown === 0;
    input.setAttribute("aria-expanded", shown ? "true" : "false");
    setActive(matches()[0] || null);
  }

  function choose(option) {
    const form = option.closest("form");
    form.querySelector("select[name=label]").value = option.dataset.value;
    if (window.htmx) window.htmx.process(form);
    form.requestSubmit();
  }

  function searchKey(event) {
    const options = matches();
    const active = options.findIndex((o) => o.getAttribute("aria-selected") === "true");
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      if (!options.length) return;
      const step = event.key === "ArrowDown" ? 1 : -1;
      setActive(options[(active + step + options.length) % options.length]);
    } else if (event.key === "Enter") {
      if (active >= 0) choose(options[active]);
    } else if (event.key === "Escape") {
      event.target.value = "";
      filterOptions();
      event.target.blur();
    } else return;
    event.preventDefault();
  }

  document.addEventListener("input", (event) => { if (event.target.id === "label-search") filterOptions(); });
  document.addEventListener("click", (event) => {
    const option = event.target.closest && event.target.closest("#label-options [role=option]");
    if (option) choose(option);
  });
  document.addEventListener("htmx:afterSettle", enhanceSearch);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", enhanceSearch);
  else enhanceSearch();

  document.addEventListener("keydown", (event) => {
    if (event.target.id === "label-search") { searchKey(event); return; }
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
    if (key === "/" && search()) { enhanceSearch(); search().focus(); event.preventDefault(); return; }
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
    const form = event.detail.elt.closest && event.detail.elt.closest("form.labels, form.label-more");
    if (form) event.detail.parameters["seconds"] = ((performance.now() - shownAt) / 1000).toFixed(2);
  });
  document.addEventListener("htmx:afterSettle", (event) => {
    if (event.target.id === "annotate-panel" || (event.detail && event.detail.elt && event.detail.elt.id === "annotate-panel")) {
      shownAt = performance.now();
    }
  });
})();
