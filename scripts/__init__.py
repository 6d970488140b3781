"""Command-line tools of `python -m h3kit` and benchmark scripts."""
