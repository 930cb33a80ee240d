"""Magnetar metadata."""
