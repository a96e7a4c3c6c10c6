"""Learning-curve tables and plots from simulation records: the report of annotate/simulation/report.py.

    python bench/sim_report.py var/sim/trec var/sim/sst2 --baselines ../shared/design/BASELINES.md

Plain Python (numpy, matplotlib; no Django), so it runs on the records of a GPU run anywhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from annotate.simulation.report import main  # noqa: E402  (the repository root goes on the path first)

if __name__ == "__main__":
    main()
