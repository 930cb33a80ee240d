"""Magnetar bookie."""
