"""Offline analytics jobs over a store directory (``mqcore-analytics``; see ``cli``)."""
