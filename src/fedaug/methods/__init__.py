"""Federated methods, one module (or subpackage) each.

The registry imports every module under this package the first time a method is asked for
(:func:`fedaug.registry._ensure_loaded`), which registers the built-in ones: a new method's module needs no
line here.
"""
