"""The phone checks of the browser tests: a page on a 390 px screen must not scroll sideways, and no
select may show its options clipped or sit cut off past the screen or a scrolling box."""

from __future__ import annotations

from typing import Any

PHONE = {"width": 390, "height": 844}
# The first elements that stick out past the screen's right edge, for the failure message.
_WIDEST = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
  .slice(0, 5)
  .map(e => `${e.tagName.toLowerCase()}#${e.id}.${e.className} (${Math.round(e.getBoundingClientRect().right)}px)`)"""

# Each visible select against the width it needs: the browser's own width for it with no width rule
# (a hidden copy beside it, so it has the same font), which fits its longest option. Narrower: the
# options are clipped. Its box past the screen's edge, or past an ancestor that hides or scrolls its
# overflow (a table scrolling sideways inside the card): it is cut off.
_CUT_SELECTS = """() => {
  const screen = document.documentElement.clientWidth, out = [];
  for (const select of document.querySelectorAll('select')) {
    const box = select.getBoundingClientRect();
    if (!box.width || getComputedStyle(select).visibility === 'hidden') continue;
    const probe = select.cloneNode(true);
    probe.removeAttribute('id');
    probe.removeAttribute('name');
    Object.assign(probe.style, {position: 'absolute', visibility: 'hidden', width: 'auto', minWidth: '0',
                                maxWidth: 'none', flex: 'none'});
    select.parentNode.appendChild(probe);
    const needed = probe.getBoundingClientRect().width;
    probe.remove();
    const name = select.name || select.id || select.getAttribute('aria-label');
    const [has, needs] = [Math.round(box.width), Math.round(needed)];
    if (needed > box.width + 1) out.push(`${name}: ${has}px shows options that need ${needs}px`);
    let cut = box.left < -0.5 || box.right > screen + 0.5;
    for (let box2, up = select.parentElement; up && !cut; up = up.parentElement) {
      if (getComputedStyle(up).overflowX === 'visible') continue;
      box2 = up.getBoundingClientRect();
      cut = box.right > box2.right + 0.5 || box.left < box2.left - 0.5;
    }
    if (cut) out.push(`${name}: cut off at ${Math.round(box.left)}–${Math.round(box.right)}px`);
  }
  return out;
}"""


def no_sideways_scroll(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    screen = page.viewport_size["width"]
    assert width <= screen, f"{page.url} is {width}px wide on a {screen}px screen: {page.evaluate(_WIDEST)}"


def cut_select_options(page: Any) -> list[str]:
    """The page's selects whose options are clipped or that are cut off, each with why; [] when none."""
    found: list[str] = page.evaluate(_CUT_SELECTS)
    return found
