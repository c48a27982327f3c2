"""The name server: broker registry and topic routes."""
