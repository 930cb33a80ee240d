"""Magnetar sinks.spark."""
