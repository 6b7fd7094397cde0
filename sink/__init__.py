"""runsink: an SMTP sink with run-scoped, leased inboxes for CI pipelines and LLM agents."""

__version__ = "0.1.0"
