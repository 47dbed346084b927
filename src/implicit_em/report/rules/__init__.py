"""Protocols and rules as data, read: each experiment's protocol (`protocols/<ID>.json`), the registry of their registered versions, and the items they test."""
