"""The paper's centralized experiments (``python -m skype.run experiments``) and the
measurement harness shared with ``bench/``.

* :mod:`~skype.experiments.harness`: one measured run (:class:`RunSpec`, ``prepare``, ``measure``);
* :mod:`~skype.experiments.design`: what an experiment is made of (sizes, runs, outcomes, report
  sections);
* :mod:`~skype.experiments.suite`: the experiments, one per paper figure or table;
* :mod:`~skype.experiments.runner`: measures a suite, saves ``results.json``, re-plots from it;
* :mod:`~skype.experiments.report` and :mod:`~skype.experiments.plots`: the Markdown report and
  the figures.
"""
