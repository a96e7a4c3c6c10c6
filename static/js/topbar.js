// The top bar on a narrow screen (app.css, up to 860 px): one line — the brand and a "Menu" button —
// with the navigation and the account links folded behind the button. The button is a real <button>
// (Tab reaches it, Enter and Space toggle it), aria-expanded says whether the menu is open, Escape
// closes it and gives the focus back to the button. Without this file nothing folds: the links wrap
// in the bar, every one reachable. Loaded right after the header (not deferred), so the bar is folded
// before the page is first drawn.
(function () {
  "use strict";
  const bar = document.querySelector("header.topbar");
  const button = bar && bar.querySelector(".menu-toggle");
  if (!button) return;

  function setOpen(open) {
    bar.classList.toggle("open", open);
    button.setAttribute("aria-expanded", String(open));
  }

  bar.classList.add("foldable");
  button.hidden = false;
  button.addEventListener("click", () => setOpen(button.getAttribute("aria-expanded") !== "true"));

  // A wider screen (app.css, over 860 px): the account folds behind a button with the user's name;
  // it opens a small menu (Password, Log out) that Escape, a click elsewhere or the button closes.
  const account = bar.querySelector(".account");
  const accountButton = account && account.querySelector(".account-toggle");
  function setAccountOpen(open) {
    account.classList.toggle("open", open);
    accountButton.setAttribute("aria-expanded", String(open));
  }
  if (accountButton) {
    accountButton.hidden = false;
    accountButton.addEventListener("click", () => setAccountOpen(accountButton.getAttribute("aria-expanded") !== "true"));
    document.addEventListener("click", (event) => {
      if (account.classList.contains("open") && !account.contains(event.target)) setAccountOpen(false);
    });
  }
  bar.addEventListener("keydown", (event) => {
    // Enter and Space belong to the focused link or button here, never to the page's shortcuts (on
    // a lead's queue, Enter decides the current row).
    if (event.key === "Enter" || event.key === " ") event.stopPropagation();
    if (event.key !== "Escape") return;
    if (account && account.classList.contains("open")) {
      event.stopPropagation();
      setAccountOpen(false);
      accountButton.focus();
      return;
    }
    if (!bar.classList.contains("open")) return;
    event.stopPropagation();  // the page's own Escape (a lead's row, a dialog) is not for this key
    setOpen(false);
    button.focus();
  });
})();
