"""One run's life, read in this order: resolve a config into what to run (:mod:`.resolve`), run it
(:mod:`.runner`), its run dir's record and the checks before a (re)start (:mod:`.resume`), every file a
resume trusts
checked (:mod:`.verify`), starting from a FedAvg sibling (:mod:`.branch`) and the run dir's lock
(:mod:`.lock`).
The round loop's own files (checkpoint, round logs) are :mod:`fedaug.engine.checkpoint` and
:mod:`fedaug.engine.round_log`. Import the modules, not this package: it imports nothing."""
