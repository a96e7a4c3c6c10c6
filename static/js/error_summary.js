// A form that failed validation: focus moves to its error summary (a full page, or the part htmx
// swapped in), so the errors are read out and seen first; a link in the summary focuses its field.
(function () {
  "use strict";
  function focusSummary() {
    const summary = document.getElementById("error-summary");
    if (summary) summary.focus();
  }
  document.addEventListener("DOMContentLoaded", focusSummary);
  document.addEventListener("htmx:afterSettle", focusSummary);
  document.addEventListener("click", (event) => {
    const link = event.target.closest("#error-summary a[data-field]");
    const field = link && document.getElementById(link.dataset.field);
    if (!field) return;
    event.preventDefault();
    field.scrollIntoView({ block: "center" });
    field.focus();
  });
})();
