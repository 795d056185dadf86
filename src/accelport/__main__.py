"""`python -m accelport` entry point."""

from accelport.cli import entry

entry()
