"""``python -m kinflow_client``: the command line (see kinflow_client.cli)."""

from .cli import main

raise SystemExit(main())
