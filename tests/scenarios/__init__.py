"""Real training runs, healthy and faulty, that the default alert rules are
judged on: by the tests, shortened, and in full by
`benchmarks/bench_alerts.py`."""
