"""The simulation harness (harness.py: jobs through the public round services, records) and its
report (report.py: plain Python over the records, no Django — also run as bench/sim_report.py)."""
