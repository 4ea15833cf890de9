"""``python -m crashsafe`` is the ``crashsafe`` command."""

from crashsafe.cli import main

main()
