"""A run's configuration: the schema (:mod:`.schema`), loading YAML and presets with their limits
(:mod:`.load`,
:mod:`.limits`, :mod:`.presets`, :mod:`.yamlio`) and which settings make a run's identity
(:mod:`.identity`)."""
