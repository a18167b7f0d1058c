"""Privacy measures and attacks (distance correlation, feature exposure, ...)."""
