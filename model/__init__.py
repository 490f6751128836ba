"""MACCO model package: open_clip CLIP + training-only predictors, losses, training, export, benchmarks.

Imports torch/open_clip only; never spacy, prefect or duckdb. The package imports none of its modules (the
factory is ``model.factory``): a module's code version is its own import closure, not the whole package's.
"""
