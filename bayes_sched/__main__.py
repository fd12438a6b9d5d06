import sys

from bayes_sched.cli import main

sys.exit(main())
