"""The campaign: the grids still to run (``studies/campaign.yaml``, :mod:`.spec`), what is archived of them
(:mod:`.ledger`), what one time budget runs (:mod:`.plan`), ``fedaug campaign run`` (:mod:`.run`) and
``fedaug campaign import`` (:mod:`.importer`); the commands are in :mod:`fedaug.cli_campaign`."""
