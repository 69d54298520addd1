"""`python -m mannlab ...` is the `mannlab` command."""

from mannlab.cli import main

raise SystemExit(main())
