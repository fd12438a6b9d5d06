import sys

try:
    from bayes_sched.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line is still importing
    sys.exit(130)

sys.exit(main())
