"""Magnetar broker."""
