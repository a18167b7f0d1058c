"""Results: read run dirs (:mod:`.store`), tables like the papers' (:mod:`.tables`), published numbers
(:mod:`.reference`), plots (:mod:`.plots`) and the ``fedaug report`` command (:mod:`.report`)."""
