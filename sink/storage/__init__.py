"""Storage: the port (base.py) and its adapters. Storage never knows SMTP or HTTP exist."""
