"""Layer 5: multi-step studies built from the theory and the sampler.

- :mod:`sgtune.workflows.verify` — predict, run, compare: a stationary-covariance prediction checked on chains;
- :mod:`sgtune.workflows.run_length` — the one run-length policy (burn-in, length, thinning) of them all;
- :mod:`sgtune.workflows.calibrate` — Algorithm 1 of Wang, Ding & Huggins (2026) end to end;
- :mod:`sgtune.workflows.refine` — repair a tuned Λ on short chains;
- :mod:`sgtune.workflows.plan` — the cheapest run that meets an accuracy;
- :mod:`sgtune.workflows.experiments` — the tables of Wang, Ding & Huggins (2026);
- :mod:`sgtune.workflows.bnn` — the SMILE paper's Bayesian-neural-network study (SMILE vs SGLD/SGHMC).
"""
