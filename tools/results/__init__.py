"""The docs generator: every ``<!-- results:NAME -->`` block of the README, docs/ and study READMEs.

Run ``python -m tools.results`` (``--check`` to compare only)."""
