"""Make the README tour's small PNGs from the browser tests' screenshots (test-artifacts/).

    python scripts/tour_images.py          # after: pytest tests/e2e/test_team_flow.py tests/e2e/test_data_browser.py

Each picture is cut to its top part, scaled to at most 900 px wide and reduced to a 64-colour
palette, so it stays well under 200 KB in git."""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "test-artifacts"
OUT = ROOT / "docs" / "tour"
# tour name → (screenshot, height to keep in source pixels: the part worth showing)
PICKS: dict[str, tuple[str, int]] = {
    "1-home.png": ("flow-01-ml-home-empty.png", 600),
    "2-team.png": ("flow-02-team-admin.png", 900),
    "3-import.png": ("flow-04-import-done.png", 700),
    "4-annotate.png": ("flow-06-annotator-labelling.png", 700),
    "5-phone.png": ("flow-08-phone-annotate.png", 844),
    "6-round-waits.png": ("flow-10-ml-refusal-says-what-is-left.png", 700),
    "7-lead.png": ("flow-11-lead-disagreement.png", 600),
    "8-curve.png": ("flow-13-ml-curve-updated.png", 1500),
    "9-item.png": ("browser-item-history.png", 900),
    "10-export.png": ("flow-14-export-page.png", 1000),
}
MAX_WIDTH = 900
LIMIT = 200_000


def shrink(source: Path, target: Path, keep_height: int) -> int:
    image = Image.open(source).convert("RGB")
    image = image.crop((0, 0, image.width, min(image.height, keep_height)))
    if image.width > MAX_WIDTH:
        image = image.resize((MAX_WIDTH, round(image.height * MAX_WIDTH / image.width)), Image.Resampling.LANCZOS)
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)
    return target.stat().st_size


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    missing = [name for name, _ in PICKS.values() if not (SOURCES / name).is_file()]
    if missing:
        print(f"missing screenshots (run the e2e tests first): {', '.join(missing)}", file=sys.stderr)
        return 1
    for name, (source, height) in PICKS.items():
        size = shrink(SOURCES / source, OUT / name, height)
        print(f"{name}: {size / 1000:.0f} KB")
        if size > LIMIT:
            print(f"{name} is over {LIMIT // 1000} KB", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
