"""`python -m etl`: the `etl` command, as the console script."""

from etl.cli import console_main

console_main()
