"""Analyses of trained runs (the FLea papers' feature separation: :mod:`fedaug.analysis.features`)."""
