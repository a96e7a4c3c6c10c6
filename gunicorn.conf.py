"""gunicorn settings. gunicorn reads this file from its working directory, so every server started at
the repository root uses it: docker-compose's web service, the live-server tests, bench/web_bench.py.
Command-line flags still override it."""

worker_class = "gthread"  # threads hide the database round trips; idle keep-alive sockets cost no thread
# Annotators pause a few seconds between labels. gunicorn's default of 2 s closed their connection
# between most pairs of labels, and the reconnect showed in the latency: p50 45 ms after a 2.5 s pause
# against 23 ms with this (bench/RESULTS.md, web). 75 s is nginx's default for the same reason.
keepalive = 75
