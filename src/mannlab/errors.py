"""Exceptions raised at the library's boundaries (configs, inputs, files)."""


class ConfigError(ValueError):
    """A configuration key or value is not valid; the message names the valid ones."""


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated or does not match the model."""


class DataError(ValueError):
    """A data file is malformed; the message names the file and the line."""
