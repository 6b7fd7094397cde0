"""The SMTP adapter: the listener (aiosmtpd handler), the pure command syntax, and TLS."""
