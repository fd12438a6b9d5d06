"""The scheduler service: ``bayes-sched serve`` runs the loop on a real cluster; ``submit``,
``status`` and ``cancel`` talk to it through its SQLite state file (:mod:`.state`), so neither
needs the service up, and a restarted service loses nothing."""
