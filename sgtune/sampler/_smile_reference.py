"""Pure-Python reference of the SMILE ensembles (:func:`sgtune.sampler.smile_ensemble.run_smile_ensemble`; slow): a
backend of the engine's seam, :class:`SmileReference`, which the public
:class:`sgtune.sampler.reference.ReferenceBackend` runs for a SMILE ensemble's plan (the tests' twin until 0.2.0,
``tests/reference/smile_twin.py``).

Written independently of the kernel from the paper's formulas, with NumPy vector operations:
the momentum map in the cosh/sinh form of appendix F.2 (the kernel uses the e^{−δ} form),
the kinetic change (d − 1) log(cosh δ + uₑ sinh δ), the target gradients as vector
expressions, the tuner through :mod:`sgtune.theory.smile` (moment matching, Wilson–Hilferty
with scipy's Φ⁻¹, bias-corrected EMAs), and the random stream of
:class:`~sgtune.sampler.rng.Xoshiro256PP`. It advances the records of the plan of
:func:`sgtune.sampler.smile_chain.target_plan` like the engine; the two agree to rounding (≈1e-12) on the
same seed.
"""
from __future__ import annotations

import math

import numpy as np

from ..theory.smile import GammaFit, ema_corrected, ema_update, gamma_moment_match, wilson_hilferty_quantile
from .rng import Xoshiro256PP
from .smile import METHOD_IDS

__all__ = ["SmileReference", "logp_grad_twin", "momentum_map_twin"]

_B1 = 0.1931833275037836
_A1 = 0.5
_B2 = 1.0 - 2.0 * _B1


def logp_grad_twin(target_id: int, prec: np.ndarray, q: float, spatial_sd: float, w: np.ndarray,
                   theta: np.ndarray) -> tuple[float, np.ndarray]:
    """log p(θ) + εᵀθ and its gradient, ε = f(θ) w (see :mod:`sgtune.sampler.targets`)."""
    if target_id == 0:
        pt = prec @ theta
        lp, g = -0.5 * float(theta @ pt), -pt
    elif target_id == 1:
        x, y = theta[0::2], theta[1::2]
        r = x * x - y
        lp = -float(np.sum(r * r / q + (x - 1.0) ** 2))
        g = np.empty_like(theta)
        g[0::2] = -(4.0 * x * r / q + 2.0 * (x - 1.0))
        g[1::2] = 2.0 * r / q
    else:
        a2 = 9.0
        t1, rest = theta[0], theta[1:]
        s = float(rest @ rest)
        wgt = math.exp(-t1)
        lp = -0.5 * t1 * t1 / a2 - 0.5 * s * wgt - 0.5 * rest.size * t1
        g = np.empty_like(theta)
        g[0] = -t1 / a2 + 0.5 * s * wgt - 0.5 * rest.size
        g[1:] = -rest * wgt
    f = math.exp(-0.5 * theta[1] / spatial_sd) if spatial_sd > 0 else 1.0
    eps = f * w
    return lp + float(eps @ theta), g + eps


def momentum_map_twin(u: np.ndarray, g: np.ndarray, eps: float) -> tuple[np.ndarray, float]:
    """Appendix F.2: u ← (u + (sinh δ + uₑ(cosh δ − 1))e)/(cosh δ + uₑ sinh δ), e = g/|g|; ΔK."""
    d = u.size
    gn = float(np.linalg.norm(g))
    if gn == 0.0:
        return u, 0.0
    e = g / gn
    ue = float(u @ e)
    delta = eps * gn / (d - 1)
    den = math.cosh(delta) + ue * math.sinh(delta)
    new = u + (math.sinh(delta) + ue * (math.cosh(delta) - 1.0)) * e
    if abs(float(u @ u) - 1.0) < 1e-6:
        new = new / np.linalg.norm(new)
    else:
        new = new / den
    return new, (d - 1) * math.log(den)


class _NoiseTwin:
    """The anchored rule's noise estimates (``sgtune.sampler.smile.noise_update``, ``noise_keep``,
    ``noise_work_var``) in plain Python, summing in the kernel's order."""

    RATE = 1e-4

    def __init__(self, d: int) -> None:
        self.d, self.lvl, self.gend = d, 0, np.zeros(d)
        self.a1, self.a2 = np.zeros(d), np.zeros(d)
        self.tr = self.sq = self.sq2 = 0.0
        self.n1 = self.n2 = 0

    @classmethod
    def _w(cls, n: int) -> float:
        return max(1.0 / n, cls.RATE)

    def update(self, g: np.ndarray, ip: np.ndarray) -> None:
        if self.lvl < 1:
            return
        tv = cross = 0.0
        a = np.empty(self.d)
        for i in range(self.d):
            a[i] = (g[i] - self.gend[i]) * ip[i] * 0.7071067811865476
            tv += a[i] * a[i]
            cross += a[i] * self.a2[i]
        self.a2, self.a1 = self.a1, a
        if not (math.isfinite(tv) and math.isfinite(cross)):
            self.lvl = 0
            return
        self.n1 += 1
        self.tr += self._w(self.n1) * (tv - self.tr)
        if self.lvl >= 3:
            self.n2 += 1
            w, c2 = self._w(self.n2), cross * cross
            self.sq2 += w * (c2 * c2 - self.sq2)
            self.sq += w * (c2 - self.sq)
        self.lvl = min(self.lvl + 1, 3)

    def keep(self, g: np.ndarray, rejected: bool) -> None:
        if rejected:
            self.lvl = 0
            return
        self.gend = g.copy()
        self.lvl = max(self.lvl, 1)

    def anisotropy(self) -> tuple[float, float]:
        """(d‖A‖_F², tr V') as ``sgtune.sampler.smile.noise_anisotropy``."""
        d = self.d
        if self.n2 < 2:
            return 0.0, 0.0
        se = math.sqrt(max(self.sq2 - self.sq * self.sq, 0.0) / min(self.n2, 2.0 / self.RATE - 1.0))
        an2 = d * (self.sq - 2.0 * se) - self.tr * self.tr
        return (an2, self.tr) if an2 > 0.0 else (0.0, self.tr)

    def work(self, h: float) -> float:
        d = self.d
        an2, _ = self.anisotropy()
        return h * h * math.sqrt(2.0 * an2 / d) / (d * d)

    def ratio(self, h: float, tau: float) -> float:
        """q = h² d (‖A‖_F − τ tr V'/d)/(4 (d − 1)² τ), as ``sgtune.sampler.smile.noise_ratio`` (0: none)."""
        d = self.d
        if not (h > 0.0 and tau > 0.0):
            return 0.0
        an2, tr = self.anisotropy()
        lam = math.sqrt(an2 / d) - tau * tr / d
        return h * h * d * lam / (4.0 * (d - 1.0) ** 2 * tau) if lam > 0.0 else 0.0

    def length(self, h: float, tau: float) -> float:
        """The noise-bias cap L_τ = h/log((1 + q)/(1 − q)) (∞: none; h/800 for q ≥ 1), as
        ``sgtune.sampler.smile.noise_length``."""
        q = self.ratio(h, tau)
        if not q > 0.0:
            return math.inf
        return h / 800.0 if q >= 1.0 else h / (math.log1p(q) - math.log1p(-q))


class SmileReference:
    """``prepare``/``advance`` over the plan of an ensemble on an analytic target (the engine's seam).

    The per-chain quantities the engine keeps in its records in its own layout (the tuner's and the
    preconditioner's EMAs, Σ ΔE so far) are kept here between calls; θ, u, the streams, the step sizes, the
    preconditioner, the statistics, the divergence steps and the recorder's arrays are the plan's.
    """

    name = "python"

    def prepare(self, plan) -> None:  # type: ignore[no-untyped-def]
        st = plan.state
        n_chains, d = st.theta.shape
        self.method = METHOD_IDS[plan.sampler]
        self.carry = [dict(gm=np.zeros(d), gv=np.zeros(d), pn=0, em=0.0, ev=0.0, en=0, cum=0.0, nz=_NoiseTwin(d))
                      for _ in range(n_chains)]
        if self.method <= 3:  # the velocity: D normals of the chain's stream, normalised
            for c in range(n_chains):
                gen = Xoshiro256PP(st.rng[c])
                u = gen.normals(d)
                st.mom[c] = u / np.linalg.norm(u)
                st.rng[c] = gen.state()

    def advance(self, plan, t0: int, n_steps: int, last: bool) -> None:  # type: ignore[no-untyped-def]
        st, mc, ora = plan.state, plan.mclmc, plan.oracle
        rec = plan.recorder_at(t0, last)
        for c in range(st.theta.shape[0]):
            if st.diverged[c] < 0:
                _advance_chain(self.method, c, st, mc, ora, rec, self.carry[c], t0, n_steps)


def _anchored_guardrail_quantile(p: float, fit: GammaFit) -> float:
    """The anchored rule's guardrail threshold: the Wilson–Hilferty p quantile of the fitted Gamma, never below its
    mean (``sgtune.sampler.smile._gamma_guardrail``)."""
    return max(float(wilson_hilferty_quantile(np.array([p]), fit.shape, fit.scale)[0]), fit.shape * fit.scale)


def _advance_chain(method, c, st, mc, ora, rec, carry, t0, n_steps):  # type: ignore[no-untyped-def]
    """Chain c from step t0 (counted from 0) by ``n_steps`` steps."""
    from scipy.special import ndtr

    params = mc.params
    target_id, prec, q, spatial_sd = int(ora.ints[0]), ora.hessian, float(ora.floats[0]), float(ora.floats[1])
    noise_chol, step, stats = ora.noise_factor, mc.step, mc.stats
    alpha, beta, zk, zlo, zhi, delta, friction, tune_start, pre_start = (
        float(params.alpha), float(params.beta), float(params.zk), float(params.zlo), float(params.zhi),
        float(params.delta), float(params.friction), float(params.tune_start), float(params.pre_start))
    pk, plo, phi = (float(ndtr(z)) for z in (zk, zlo, zhi))
    anchored = float(params.mode) != 0.0
    v_star, gain, clip = float(params.anchor), float(params.gain), float(params.clip)
    weight = float(getattr(params, "noise_weight", 0.0))
    refresh, length0 = float(getattr(params, "refresh", 0.0)), float(getattr(params, "refresh_length", 0.0))
    tau = float(getattr(params, "noise_bias", 0.0)) if refresh != 0.0 else 0.0  # the noise-bias cap, under the refresh
    noise_on = weight > 0.0 or refresh != 0.0
    nz = carry["nz"]
    d = st.theta.shape[1]
    floor = float(params.floor) * math.sqrt(d * v_star) if anchored else 0.0  # the guardrail's floor k √(d v*)
    mclmc, precond, tuned = method <= 3, method in (1, 3), method in (2, 3)
    gen = Xoshiro256PP(st.rng[c])
    th, u, ip = st.theta[c].copy(), st.mom[c].copy(), mc.ipre[c].copy()
    gm, gv, pn, em, ev, en, cum = (carry[k] for k in ("gm", "gv", "pn", "em", "ev", "en", "cum"))
    for t in range(t0, t0 + n_steps):
        w = noise_chol @ gen.normals(d)
        h = float(step[c])
        if mclmc:
            rejections = stats[c, 0]
            lp0, g = logp_grad_twin(target_id, prec, q, spatial_sd, w, th)
            if precond:
                gm, gv, pn, ip = _precond_twin(gm, gv, pn, g, alpha, pre_start, ip)
            if noise_on:
                nz.update(g, ip)
            prev = th.copy()
            th, u, g, de = _mn_step_twin((target_id, prec, q, spatial_sd, w), th, u, ip, g, h, lp0)
            if tuned and anchored:  # ξ = min(ΔE²/(d v*), ξ_max); ε ← ε exp(γ(1 − ξ)/6); the guardrail as below
                a = abs(de)
                reject, xi = True, clip
                if math.isfinite(a):
                    reject = False
                    if en >= tune_start:
                        mu, var = ema_corrected(em, ev, en, beta)
                        if mu > 0 and var > 0:
                            fit = gamma_moment_match(float(mu), math.sqrt(float(var)))
                            reject = a > _anchored_guardrail_quantile(pk, fit) and a > floor
                    xi = min(max(a * a / (d * v_star), weight * nz.work(h) / v_star if weight > 0.0 else 0.0), clip)
                act = not math.isfinite(a) or en >= tune_start
                if math.isfinite(a):
                    em, ev, en = ema_update(em, ev, en, a, beta)
                factor = math.exp(gain / math.sqrt(1.0 + max(en - tune_start, 0) / 1000.0) * (1.0 - xi) / 6.0) if act else 1.0
                if reject or not (np.all(np.isfinite(th)) and np.sum(np.abs(th)) < 1e150):
                    stats[c, 0] += 1.0
                    th = prev
                    u = np.zeros(d)
                    reject = True
                step[c] = h * factor
                if noise_on:
                    nz.keep(g, reject)
            elif tuned:
                reject = False
                factor = 1.0
                a = abs(de)
                if not math.isfinite(a):
                    reject, factor = True, 1.0 - delta
                else:
                    if en >= tune_start:
                        mu, var = ema_corrected(em, ev, en, beta)
                        if mu > 0 and var > 0:
                            fit = gamma_moment_match(float(mu), math.sqrt(float(var)))
                            qk, qlo, qhi = wilson_hilferty_quantile(np.array([pk, plo, phi]), fit.shape, fit.scale)
                            reject = a > qk
                            factor = 1.0 + delta if a < qlo else (1.0 - delta if a > qhi else 1.0)
                    em, ev, en = ema_update(em, ev, en, a, beta)
                if reject or not (np.all(np.isfinite(th)) and np.sum(np.abs(th)) < 1e150):
                    stats[c, 0] += 1.0
                    th = prev
                    u = np.zeros(d)
                    reject = True
                step[c] = h * factor
                if noise_on:
                    nz.keep(g, reject)
            elif noise_on:
                nz.keep(g, False)
            cum = _add_energy_error(stats, c, de, cum)
            if refresh != 0.0:
                u = _refresh_twin(refresh, length0, carry, th, u, ip, h, stats[c, 0] != rejections, gen,
                                  nz.length(h, tau) if tau > 0.0 else math.inf)
        else:
            th, u = _langevin_step(method, (target_id, prec, q, spatial_sd, w), th, u, h, friction, gen)
        if not (np.all(np.isfinite(th)) and np.sum(np.abs(th)) < 1e150):
            st.diverged[c] = t + 1  # the engine counts steps from 1
            break
        _record_draw(rec, c, t + 1, th, float(step[c]), cum)
    st.theta[c], st.mom[c], mc.ipre[c], st.rng[c] = th, u, ip, gen.state()
    carry.update(gm=gm, gv=gv, pn=pn, em=em, ev=ev, en=en, cum=cum)


def _precond_twin(gm, gv, pn, g, alpha, pre_start, ip):  # type: ignore[no-untyped-def]
    """pSMILE's EMAs of the gradient and, from step ``pre_start`` on, the inverse preconditioner 1/p, p = √d σ/|σ|."""
    gm, gv, pn = ema_update(gm, gv, pn, g, alpha)
    if pn >= pre_start:
        _, var = ema_corrected(gm, gv, pn, alpha)
        if np.all(var > 0):
            sig = np.sqrt(var)
            ip = 1.0 / (math.sqrt(len(g)) * sig / np.linalg.norm(sig))
    return gm, gv, pn, ip


def _mn_step_twin(target, th, u, ip, g, h, lp0):  # type: ignore[no-untyped-def]
    """One minimal-norm P-Q-P-Q-P step of size h from θ (gradient g, log density lp0, inverse preconditioner ip) on
    the step's target (its noise draw included): the new θ, u, gradient and the energy error ΔE."""
    dk = 0.0
    lp1 = lp0
    for kind, coef in (("P", _B1), ("Q", _A1), ("P", _B2), ("Q", _A1), ("P", _B1)):
        if kind == "P":
            u, k = momentum_map_twin(u, g * ip, coef * h)
            dk += k
        else:
            th = th + coef * h * u * ip
            lp1, g = logp_grad_twin(*target, th)
    return th, u, g, dk - (lp1 - lp0)


def _refresh_twin(mode, length, carry, th, u, ip, h, rejected, gen, cap=math.inf):  # type: ignore[no-untyped-def]
    """The partial refresh after a step (``sgtune.sampler.smile_chain.refresh``): the path's running mean and sum of
    squared deviations (``carry``), L fixed or √(Σ Var θ'ᵢ) from the 100th position on, shortened to the noise-bias
    cap ``cap`` where that is shorter (or there is no L yet), and u ← (c₁u + √(1 − c₁²) z/√d)/‖·‖, c₁ = e^{−h/L},
    unless the step was rejected."""
    if mode == 2.0:
        n = carry.get("pn_path", 0) + 1
        mean, m2 = carry.get("path_mean", np.zeros_like(th)), carry.get("path_m2", np.zeros_like(th))
        dev = th - mean
        mean = mean + dev / n
        m2 = m2 + dev * (th - mean)
        carry.update(pn_path=n, path_mean=mean, path_m2=m2)
        length = math.sqrt(float(np.sum(m2 * (1.0 / ip) ** 2)) / n) if n >= 100 else 0.0
    if cap < length or not length > 0.0:
        length = cap
    if rejected or not (0.0 < length < math.inf):
        return u
    c1 = math.exp(-h / length)
    v = c1 * u + math.sqrt(max(1.0 - c1 * c1, 0.0)) * gen.normals(len(u)) / math.sqrt(len(u))
    return v / np.linalg.norm(v)


def _langevin_step(method, target, th, u, h, friction, gen):  # type: ignore[no-untyped-def]
    """SGLD (method 4: θ ← θ + h g + sqrt(2h) η) or SGHMC (u ← u + h(g − γu) + sqrt(2γh) η, θ ← θ + h u) on the
    target ``(target_id, prec, q, spatial_sd, w)`` of this step; (θ, u)."""
    _, g = logp_grad_twin(*target, th)
    eta = gen.normals(th.size)
    if method == 4:
        return th + h * g + math.sqrt(2.0 * h) * eta, u
    u = u + h * (g - friction * u) + math.sqrt(2.0 * friction * h) * eta
    return th + h * u, u


def _add_energy_error(stats, c, de, cum):  # type: ignore[no-untyped-def]
    """A finite energy error ΔE into chain c's statistics (Σ ΔE, Σ |ΔE|, Σ ΔE²); the running Σ ΔE."""
    if math.isfinite(de):
        cum += de
        stats[c, 1] += de
        stats[c, 2] += abs(de)
        stats[c, 3] += de * de
    return cum


def _record_draw(rec, c, u, th, step, cum):  # type: ignore[no-untyped-def]
    """Draw u (counted from 1) of chain c: Σθ and Σθ² when the recorder keeps them; θ, the step size and Σ ΔE
    every ``thin`` draws."""
    if rec.theta_sum.shape[1] > 0:
        rec.theta_sum[c] += th
        rec.theta_sq_sum[c] += th * th
    if rec.thin > 0 and u % rec.thin == 0:
        k = u // rec.thin - 1
        rec.trace[c, k] = th
        rec.step_trace[c, k] = step
        rec.energy_trace[c, k] = cum
