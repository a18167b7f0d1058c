"""The project's own machinery, outside the installed package: the campaign, the docs generator, counters."""
