"""Reusable window widgets, fed plain values so they never touch the engine."""
