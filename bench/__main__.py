"""``python -m bench``: see ``bench/README.md``."""

from bench.bench_cli import main

raise SystemExit(main())
