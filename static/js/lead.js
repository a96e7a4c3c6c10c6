// Lead queues by keyboard: j/k move between rows, 1–9 choose a label, x unlabelable, n note, Enter
// decide, r send to review, u undo, ? help. After a decision the next undecided row takes the focus
// (htmx swaps the decided row in place). Without this file every row is a set of plain forms.
(function () {
  "use strict";
  const rows = () => [...document.querySelectorAll("table.queue tr.item-row")];
  const current = () => document.querySelector("table.queue tr.item-row.current");
  const typing = (el) => el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  // request → id of the row it acts on (htmx swaps the row whole). Per request: a key pressed just
  // after one swap must not take the settling of that swap for its own.
  const acting = new WeakMap();

  function focusRow(row) {
    if (!row) return;
    for (const r of rows()) r.classList.toggle("current", r === row);
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    const all = rows();
    const at = all.indexOf(current());
    focusRow(all[Math.min(Math.max(at + step, 0), all.length - 1)] || all[0]);
  }

  const undecided = (row) => row && row.querySelector("select[name=decision]");

  function nextUndecided(row) {
    const all = rows();
    const after = all.slice(all.indexOf(row) + 1).find(undecided);
    return after || all.find(undecided) || row;
  }

  function choose(row, pick) {
    const select = undecided(row);
    if (!select) return;
    const option = pick(select.options);
    if (option) select.value = option.value;
  }

  function submit(row, selector) {
    const form = row.querySelector(selector);
    if (!form) return;
    if (window.htmx) window.htmx.process(form);
    form.requestSubmit();
  }

  function toggleHelp() {
    const dialog = document.getElementById("lead-shortcuts");
    if (dialog.open) dialog.close(); else dialog.showModal();
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
    const row = current();
    if (typing(event.target)) {
      if (event.key === "Escape" && row) { event.preventDefault(); focusRow(row); }
      return;
    }
    if (event.key === "?") { toggleHelp(); event.preventDefault(); return; }
    if (document.querySelector("dialog[open]")) return;
    const key = event.key;
    if (key === "j" || key === "k") { move(key === "j" ? 1 : -1); event.preventDefault(); return; }
    if (!row) return;
    if (/^[1-9]$/.test(key)) {
      choose(row, (options) => {
        const option = options[Number(key)];  // options[0] is "Choose…"
        return option && option.value !== "unlabelable" ? option : null;
      });
    } else if (key === "x") {
      choose(row, (options) => [...options].find((o) => o.value === "unlabelable"));
    } else if (key === "n") {
      const note = row.querySelector("input[name=note]");
      if (note) note.focus();
    } else if (key === "Enter") {
      const select = undecided(row);
      if (select && !select.value) { select.focus(); } else submit(row, "form[action*='/adjudicate/']");
    } else if (key === "r") {
      submit(row, "form.to-review");
    } else if (key === "u") {
      submit(row, "form.undo");
    } else return;
    event.preventDefault();
  });

  // Keys, clicks and Enter in the note alike: remember the row a request acts on.
  document.addEventListener("htmx:beforeRequest", (event) => {
    const row = event.detail.elt.closest && event.detail.elt.closest("table.queue tr.item-row");
    if (row && event.detail.xhr) acting.set(event.detail.xhr, row.id);
  });

  // The row came back from the server: decided (or sent away) → the next undecided row; an error or
  // an undo → the same row again.
  document.addEventListener("htmx:afterSettle", (event) => {
    const xhr = event.detail && event.detail.xhr;
    const id = xhr && acting.get(xhr);
    if (!id) return;
    acting.delete(xhr);
    const row = document.getElementById(id);
    if (!row) return;
    focusRow(undecided(row) || row.querySelector(".error") ? row : nextUndecided(row));
  });

  // A row clicked or tabbed into becomes the current one.
  document.addEventListener("focusin", (event) => {
    const row = event.target.closest && event.target.closest("table.queue tr.item-row");
    if (row && !row.classList.contains("current")) for (const r of rows()) r.classList.toggle("current", r === row);
  });

  function start() {
    const first = rows().find(undecided) || rows()[0];
    if (first && !current()) focusRow(first);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
