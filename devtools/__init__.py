"""Development tools shared by the tests and the benchmarks (not shipped in the package)."""
