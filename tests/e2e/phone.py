"""The phone check of the browser tests: a page on a 390 px screen must not scroll sideways."""

from __future__ import annotations

from typing import Any

PHONE = {"width": 390, "height": 844}
# The first elements that stick out past the screen's right edge, for the failure message.
_WIDEST = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
  .slice(0, 5)
  .map(e => `${e.tagName.toLowerCase()}#${e.id}.${e.className} (${Math.round(e.getBoundingClientRect().right)}px)`)"""


def no_sideways_scroll(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    screen = page.viewport_size["width"]
    assert width <= screen, f"{page.url} is {width}px wide on a {screen}px screen: {page.evaluate(_WIDEST)}"
