"""The reference equations the models are built from, as the papers write them: memory
addressing (addressing.py), controllers (controllers.py) and the sampling estimators
(sampling.py). Plain tensor code on any device; the fast paths of mannlab.ops are
tested against it."""
