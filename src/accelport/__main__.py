"""`python -m accelport` entry point."""

from accelport.cli import main

raise SystemExit(main())
