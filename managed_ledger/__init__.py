"""Magnetar managed_ledger."""
