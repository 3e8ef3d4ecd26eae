"""Thin shim so ``python cli.py ...`` works from a checkout; all logic lives in :mod:`sgtune.cli`."""
from sgtune.cli import main

if __name__ == "__main__":
    main()
