"""The campaign: the grids still to run (``studies/campaign.yaml``, :mod:`.spec`), what is archived of them
(:mod:`.ledger`), what one time budget runs (:mod:`.plan`), ``fedaug campaign run`` (:mod:`.run`) and
``fedaug campaign import`` (:mod:`.importer`); the commands are in :mod:`tools.campaign.cli`."""

MAX_STUDIES = 6
"""Archives (one per study) one command writes: with its log and summary, the 8 files a GPU call returns."""
