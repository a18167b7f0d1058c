"""Local training: THE loop (:mod:`.loop`), the hooked client every method builds on (:mod:`.client`), the
objective's types (:mod:`.objective`), CUDA-graph steps (:mod:`.step_graphs`), padded-row masks
(:mod:`.row_mask`)
and flat weight vectors (:mod:`.flat_state`)."""
