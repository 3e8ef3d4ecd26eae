"""Layer 5: multi-step studies built from the theory and the sampler.

- :mod:`sgtune.workflows.calibrate` — pick β (and Λ) so the chain's covariance matches a target;
- :mod:`sgtune.workflows.experiments` — seed 003's tables (theories compared against chains);
- :mod:`sgtune.workflows.bnn` — seed 001's Bayesian-neural-network study (SMILE vs SGLD/SGHMC).
"""
