"""The one error type of analysis/, in a module that imports nothing heavy (the CLI needs it
before pandas is imported)."""


class ExperimentError(ValueError):
    """Bad input: not a Tune experiment, no trials, or a metric that no trial reported.

    The message is one line meant for the user; the CLI prints it without a traceback.
    """
