"""`python -m localgpt_index` is `lgpt-index`."""

from .cli import main

main(prog_name="lgpt-index")
