// The ML page: an answer to a button (a refusal, "round 2 requested") stays through the live
// refreshes, but once a round has moved on since it was given, it no longer holds: take it away.
(function () {
  "use strict";
  document.addEventListener("htmx:afterSettle", () => {
    const live = document.getElementById("ml-live");
    const message = document.getElementById("round-message");
    if (!live || !message || !message.textContent.trim()) return;
    if (message.dataset.state !== live.dataset.state) {
      message.replaceChildren();
      message.dataset.state = live.dataset.state;
    }
  });
})();
