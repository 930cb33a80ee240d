"""Magnetar bk_client."""
