"""Layer 5: multi-step studies built from the theory and the sampler.

- :mod:`sgtune.workflows.calibrate` — pick β (and Λ) so the chain's covariance matches a target;
- :mod:`sgtune.workflows.experiments` — Wang, Ding & Huggins's (2026) tables (theories compared against chains);
- :mod:`sgtune.workflows.bnn` — the SMILE paper's (2025) Bayesian-neural-network study (SMILE vs SGLD/SGHMC).
"""
