from collcheck.cli import run_main

run_main()
