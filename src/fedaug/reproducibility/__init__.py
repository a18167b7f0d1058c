"""Run identity, resuming and branching: when two runs are the same run, and what may continue where.

Four modules, read in this order, behind the few functions the runner and the sweep call:

- :mod:`~fedaug.reproducibility.identity`: where a run dir is (``run_dir_for``; a sweep's name segment,
  ``format_suffix``; the FedAvg sibling, ``fedavg_run_dir``) and which config keys change results
  (``result_config``: one rule for resuming, branching, sweep de-duplication and result tables);
- :mod:`~fedaug.reproducibility.resume`: the run dir's record (``record_run`` writes ``config.yaml`` and
  ``env.json``) and the checks that read it before a run (re)starts (``check_existing``,
  ``check_checkpoint``, ``finished_summary``);
- :mod:`~fedaug.reproducibility.verify`: every file a resume, a skip or a report trusts, checked before it is
  used (``verify_run_dir``: ``identity.json`` against ``config.yaml``, the checkpoint's digest, the round logs
  line by line, a finished run's summary; ``record_identity``);
- :mod:`~fedaug.reproducibility.branch`: starting a run from its FedAvg sibling's checkpoint
  (``start_from_fedavg`` for the runner; ``branch_plan`` / ``branch_source`` / ``has_start_checkpoint`` for a
  sweep's order and time estimate), for methods that say they are FedAvg in their first rounds
  (:class:`fedaug.api.BranchesFromFedAvg`).

The runner hands them the :class:`~fedaug.experiments.resolve.ResolvedRun` it runs; a sweep, which plans
before any data is loaded, hands them configs. Import the modules, not this package: it imports nothing, so
that :mod:`fedaug.experiments.load` can use ``identity`` below the others.
"""
