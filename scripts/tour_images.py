"""Make the README tour's small PNGs from the browser tests' screenshots (test-artifacts/).

    pytest tests/e2e/{test_team_flow,test_label_errors,test_scale}.py -k "team or scans or problem_7_two"
    python scripts/tour_images.py

The team flow (one project, from an empty install to round 1's model and what a lead does after it)
gives every picture but two: the label search of a project with 200 labels (test_scale.py) and the
label-error scan, which needs 50 labelled items (the TREC project of test_label_errors.py). Each
picture is cut to its top part, scaled to at most 900 px wide and reduced to a 64-colour palette, so
it stays well under 200 KB in git and the tour under 1 MB."""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "test-artifacts"
OUT = ROOT / "docs" / "tour"
# tour name → (screenshot, height to keep in source pixels: the part worth showing). "flow-*-" names are
# the team flow's (tests/e2e/test_team_flow.py numbers them in order; the number is not part of the pick).
PICKS: dict[str, tuple[str, int]] = {
    "1-home.png": ("flow-*-ml-home-empty.png", 450),
    "2-team.png": ("flow-*-team-admin.png", 900),
    "3-import.png": ("flow-*-import-done.png", 320),
    "4-round.png": ("flow-*-ml-round-1-labeling.png", 960),
    "5-annotate.png": ("flow-*-annotator-labelling.png", 650),
    "6-phone.png": ("flow-*-phone-annotate.png", 844),
    "7-label-search.png": ("scale-200-labels-search.png", 860),
    "8-round-waits.png": ("flow-*-ml-refusal-says-what-is-left.png", 780),
    "9-lead.png": ("flow-*-lead-disagreement.png", 600),
    "10-curve.png": ("flow-*-ml-curve-updated.png", 1960),
    "11-notifications.png": ("flow-*-setup-notifications.png", 600),
    "12-items.png": ("flow-*-items-sorted-bulk.png", 900),
    "13-item.png": ("flow-*-item-history.png", 900),
    "14-export.png": ("flow-*-export-page.png", 2000),
    "15-people.png": ("flow-*-agreement-people.png", 400),
    "16-label-errors.png": ("label-errors-scanned.png", 1000),
}
MAX_WIDTH = 900
LIMIT = 200_000
TOTAL_LIMIT = 1_000_000


def shrink(source: Path, target: Path, keep_height: int) -> int:
    image = Image.open(source).convert("RGB")
    image = image.crop((0, 0, image.width, min(image.height, keep_height)))
    if image.width > MAX_WIDTH:
        image = image.resize((MAX_WIDTH, round(image.height * MAX_WIDTH / image.width)), Image.Resampling.LANCZOS)
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)
    return target.stat().st_size


def source_of(pattern: str) -> Path | None:
    """The newest screenshot matching ``pattern`` (a rerun of the flow may leave other numbers behind)."""
    found = sorted(SOURCES.glob(pattern), key=lambda path: path.stat().st_mtime)
    return found[-1] if found else None


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    sources = {name: source_of(pattern) for name, (pattern, _) in PICKS.items()}
    missing = [PICKS[name][0] for name, path in sources.items() if path is None]
    if missing:
        print(f"missing screenshots (run the e2e tests first): {', '.join(missing)}", file=sys.stderr)
        return 1
    total = 0
    for name, (_, height) in PICKS.items():
        source = sources[name]
        assert source is not None
        size = shrink(source, OUT / name, height)
        total += size
        print(f"{name}: {size / 1000:.0f} KB  ← {source.name}")
        if size > LIMIT:
            print(f"{name} is over {LIMIT // 1000} KB", file=sys.stderr)
            return 1
    stale = sorted(path.name for path in OUT.glob("*.png") if path.name not in PICKS)
    if stale:
        print(f"not in the tour any more (delete them): {', '.join(stale)}", file=sys.stderr)
    print(f"total: {total / 1000:.0f} KB")
    if total > TOTAL_LIMIT:
        print(f"the tour is over {TOTAL_LIMIT // 1000} KB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
