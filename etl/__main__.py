from etl.cli import main

main()
