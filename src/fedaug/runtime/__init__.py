"""Where and how the code runs: the device (:mod:`.device`), precision (:mod:`.precision`), seeding
(:mod:`.seeding`), machine facts (:mod:`.machine`), start-up timing (:mod:`.startup`), memory format
(:mod:`.memory_format`), paths and files (:mod:`.paths`, :mod:`.files`, :mod:`.figure_files`), one-time log
lines
(:mod:`.log_once`)."""
