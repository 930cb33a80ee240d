"""Magnetar retention."""
