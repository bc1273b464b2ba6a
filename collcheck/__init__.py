"""collcheck: collective-communication checks for distributed PyTorch."""

__version__ = "0.1.0"
