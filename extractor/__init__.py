"""Self-hostable text-extraction API and its labeling service."""

__version__ = "0.1.0"
