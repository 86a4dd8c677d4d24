"""Presentation: tables built from measurement records."""
