"""A job script that never reports (the service's report timeout)."""

import time

time.sleep(600)
