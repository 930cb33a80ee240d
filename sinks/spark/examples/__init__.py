"""Runnable examples of the ``magnetar`` Spark data source (see each module's docstring)."""
