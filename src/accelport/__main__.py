"""`python -m accelport`, and the `accelport` console script."""

import gc


def entry() -> None:
    # Importing the CLI builds many long-lived objects, which the cyclic collector would
    # walk again and again; cli.main keeps it off through the rest of start-up.
    collecting = gc.isenabled()
    gc.disable()
    try:
        from accelport.cli import entry as run
    finally:
        if collecting:
            gc.enable()
    run()


if __name__ == "__main__":
    entry()
