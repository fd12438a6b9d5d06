import sys

from bayes_sched.interrupts import keep_interrupts

try:
    with keep_interrupts():
        from bayes_sched.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line is still importing
    sys.exit(130)

sys.exit(main())
