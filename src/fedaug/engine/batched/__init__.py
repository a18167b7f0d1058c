"""A round's clients trained at once (``engine.batched_clients``): stacked under vmap (:mod:`.stacked`) or
padded
to static shapes (:mod:`.padded`, :mod:`.padded_graphs`); :mod:`.modes` says which a run uses. Off by default
and
fenced here: never measured faster than the sequential engine (2.38x / 1.95x slower on the CPU, not yet run
on a
GPU; ``docs/guide/gpu.md``)."""
