"""Pieces several methods share: losses, data pools, payload packing, aggregation, config checks and
presets."""
