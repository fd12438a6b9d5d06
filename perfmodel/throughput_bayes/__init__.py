"""Bayesian fit of the step-time model in Pyro, and its predictive distribution, one job per module.

* :mod:`~perfmodel.throughput_bayes.model`: the model, a plain function of data
  (:func:`~perfmodel.throughput_bayes.model.step_time_model`, :class:`StepTimeData`), and its
  noise terms;
* :mod:`~perfmodel.throughput_bayes.prior`: the priors (:class:`StepTimePrior`);
* :mod:`~perfmodel.throughput_bayes.guide`: the SVI guide's family, a full-rank guide whose
  whitened coordinates are Student-t (tails no lighter than the posterior's) and each pass through
  a monotone spline (skewed marginals), in coordinates where the all-reduce terms' trade-off is
  linear (:class:`NetworkCoordinates`);
* :mod:`~perfmodel.throughput_bayes.laplace`: the posterior mode and the Laplace approximation
  there, where the guide starts;
* :mod:`~perfmodel.throughput_bayes.svi`: SVI in the unconstrained space;
* :mod:`~perfmodel.throughput_bayes.importance`: the guide's affine part adapted as an importance
  proposal to the posterior's PSIS-weighted moments, checked by Pareto-smoothed importance
  sampling (PSIS k-hat) on fresh draws, which are resampled by their PSIS weights;
* :mod:`~perfmodel.throughput_bayes.nuts`: Pyro's NUTS, alone (``method="nuts"``, to check SVI)
  or as the fallback where the guide's k-hat is too high;
* :mod:`~perfmodel.throughput_bayes.diagnostics`: how far to trust a fit (:class:`FitDiagnostics`);
* :mod:`~perfmodel.throughput_bayes.posterior`: the draws and the predictive distribution
  (:class:`ThroughputPosterior`);
* :mod:`~perfmodel.throughput_bayes.fit`: the entry point, :func:`fit_throughput_posterior`.

Import each name from its module; the main three also from the package top ``perfmodel``.
"""
