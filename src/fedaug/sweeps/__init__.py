"""Many runs: the grid and its shards (:mod:`.sweep`), their order (:mod:`.order`), worker processes
(:mod:`.workers`), cluster job arrays (:mod:`.cluster`) and time estimates (:mod:`.estimate`,
:mod:`.round_ratio`)."""
