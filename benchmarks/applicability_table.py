"""Applicability indicators against long chains on real and simulated problems (issue 19 thresholds).

Run: python benchmarks/applicability_table.py [PROBLEM ...] > rows.jsonl; then
     python benchmarks/applicability_table.py --table rows.jsonl  (the Markdown table of docs/guide/applicability.md).
Needs the [data] extra (scikit-learn, statsmodels). One JSON line per problem.
"""
import sys, time, json, math, warnings, numpy as np
warnings.simplefilter("ignore")
from sgtune.io.data import make_dataset, example
from sgtune.models import get_model, expand
from sgtune.theory.tuning import tune
from sgtune.theory.applicability import applicability
from sgtune.workflows.verify import CheckOptions, verify_stationary_cov
from sgtune.core.config import Dynamics, RunSpec

def std(X): 
    s = X.std(0); s[s == 0] = 1; return (X - X.mean(0)) / s

def problems():
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine, load_iris
    import statsmodels.api as sm
    bc = load_breast_cancer(); X, y = bc.data, bc.target.astype(float)
    P = {}
    P["bc-std"] = ("logistic", make_dataset(std(X), y, intercept=True), 1.0, 32, "sandwich")
    P["bc-raw"] = ("logistic", make_dataset(X, y), 1.0, 32, "sandwich")
    P["bc-std-posterior"] = ("logistic", make_dataset(std(X), y, intercept=True), 1.0, 32, "posterior")
    P["bc-std-prior30"] = ("logistic", make_dataset(std(X), y, intercept=True), 30.0, 32, "sandwich")
    db = load_diabetes(); P["diabetes"] = ("linear", make_dataset(db.data, db.target, intercept=True), 0.0, 32, "sandwich")
    r = sm.datasets.randhie.load_pandas(); P["randhie"] = ("poisson", make_dataset(r.exog.values.astype(float), r.endog.values.astype(float), intercept=True), 0.0, 64, "sandwich")
    s = sm.datasets.spector.load_pandas(); P["spector"] = ("logistic", make_dataset(std(s.exog.values.astype(float)), s.endog.values.astype(float), intercept=True), 1.0, 8, "sandwich")
    f = sm.datasets.fair.load_pandas(); P["fair-linear"] = ("linear", make_dataset(std(f.exog.values.astype(float)), f.endog.values.astype(float), intercept=True), 0.0, 64, "sandwich")
    f2 = f.data; P["fair-poisson"] = ("poisson", make_dataset(std(f.exog.values.astype(float)), np.round(f.endog.values).astype(float), intercept=True), 0.0, 64, "sandwich")
    a = sm.datasets.anes96.load_pandas(); ya = (a.endog.values >= 4).astype(float)
    P["anes96"] = ("logistic", make_dataset(std(a.exog.values.astype(float)), ya, intercept=True), 1.0, 32, "sandwich")
    w = load_wine(); P["wine-binary"] = ("logistic", make_dataset(std(w.data), (w.target == 0).astype(float), intercept=True), 1.0, 16, "sandwich")
    ir = load_iris(); m = ir.target > 0
    P["iris-binary"] = ("logistic", make_dataset(std(ir.data[m]), (ir.target[m] == 2).astype(float), intercept=True), 1.0, 16, "sandwich")
    e = sm.datasets.engel.load_pandas(); P["engel-raw"] = ("linear", make_dataset(e.data[["income"]].values, e.data["foodexp"].values, intercept=True), 0.0, 16, "sandwich")
    g = sm.datasets.grunfeld.load_pandas(); P["grunfeld-raw"] = ("linear", make_dataset(g.data[["value", "capital"]].values.astype(float), g.data["invest"].values.astype(float), intercept=True), 0.0, 16, "sandwich")
    P["ex-logistic"] = ("logistic", example("logistic"), 0.0, 32, "sandwich")
    P["ex-poisson"] = ("poisson", example("poisson"), 0.0, 32, "sandwich")
    P["ex-hetero-linear"] = ("linear", example("hetero-linear"), 0.0, 64, "sandwich")
    hl = example("hetero-linear", seed=1)
    P["beta-linear-1.5"] = ("beta-linear:1.5", hl, 0.0, 32, "sandwich")
    P["beta-linear-2"] = ("beta-linear:2.0", hl, 0.0, 8, "sandwich")
    rng = np.random.default_rng(5); Xs = rng.standard_normal((400, 5)); th = np.array([4., -3, 2, 0, 1])
    ys = (rng.random(400) < 1 / (1 + np.exp(-Xs @ th))).astype(float)
    P["sim-near-separable"] = ("logistic", make_dataset(Xs, ys), 0.1, 16, "sandwich")
    Z = rng.standard_normal((1000, 1)); Xc = Z + 0.01 * rng.standard_normal((1000, 4)); yc = Xc @ np.ones(4) + rng.standard_normal(1000)
    P["sim-illcond-linear"] = ("linear", make_dataset(Xc, yc, intercept=True), 0.0, 32, "sandwich")
    Xp = rng.standard_normal((3000, 6)) * 0.5; yp = rng.poisson(np.exp(0.5 + Xp @ np.full(6, 0.4))).astype(float)
    P["sim-poisson-smallB"] = ("poisson", make_dataset(Xp, yp, intercept=True), 0.0, 4, "sandwich")
    Xl = rng.standard_normal((300, 8)); yl = (rng.random(300) < 1 / (1 + np.exp(-Xl @ np.full(8, 0.5)))).astype(float)
    P["sim-logistic-small-N"] = ("logistic", make_dataset(Xl, yl, intercept=True), 0.5, 8, "sandwich")
    return P

def model_of(spec):
    if spec.startswith("beta-linear"):
        return get_model("beta-linear", beta_power=float(spec.split(":")[1]))
    return get_model(spec)

def main(names=None, steps_cap=1_000_000):
    P = problems()
    for name, (spec, ds, prior, B, target) in P.items():
        if names and name not in names: continue
        t0 = time.time(); model = model_of(spec)
        row = {"problem": name, "model": spec, "N": ds.n_data, "D": ds.dim, "B": B, "target": target, "prior": prior}
        try:
            e = expand(model, ds, prior)
            beta = ds.n_data if target == "posterior" else math.inf
            res = tune(e, Dynamics(None, B, inv_temperature=beta), target=target)
            a = applicability(model, ds, e, res.stationary, target_cov=res.target_cov)
            d = a.to_dict(); d.pop("thresholds")
            row.update(applicable=a.applicable, reasons=list(a.reasons), deviation=a.predicted_deviation,
                       curvature=d["curvature_change"]["curvature"], noise=d["curvature_change"]["gradient_noise"],
                       eq=a.equilibration_steps, tau=a.tau_worst, ratio=d["equilibration_ratio"], shift=a.mean_shift,
                       col=d["conditioning"]["column_scale_ratio"], t_appl=time.time() - t0)
            tau = max(1.0, a.tau_worst)
            steps = int(min(max(200_000, 4000 * tau), steps_cap))
            t1 = time.time()
            rep = verify_stationary_cov(model, ds, e, Dynamics(res.step_matrix, B, inv_temperature=beta),
                                        RunSpec(steps, n_chains=8, burn_in=steps // 10, seed=11),
                                        check=CheckOptions(relative_tolerance=0.05), prior_precision=prior)
            P_, E_ = rep.predicted, rep.empirical
            s = np.sqrt(np.diag(P_)); iu = np.triu_indices(len(s))
            dev = np.abs(E_ - P_) / np.outer(s, s); se = rep.chains.cov_standard_error / np.outer(s, s)
            from sgtune.theory.applicability import _entrywise_deviation as ed
            row.update(chain_vs_sl=(ed(E_, a.linearised_cov) if a.linearised_cov is not None else None), chain_dev=float(dev[iu].max()), chain_se=float(se[iu].max()), passed_5pct=bool(rep.test.passed),
                       z_max=float(rep.test.z_max), frob=float(rep.test.relative_frobenius_error), steps=steps, t_chain=time.time() - t1)
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        print(json.dumps(row), flush=True)

def table(path):
    print("| problem | model | N | D | B | applicable | predicted deviation | equilibration / τ | curvature change "
          "| chain error ± MCSE | chain vs statistically linearised | verify 5 % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for line in open(path):
        r = json.loads(line)
        if "error" in r:
            print(f"| {r['problem']} | {r['model']} | {r['N']} | {r['D']} | {r['B']} | (error: {r['error'][:60]}) |||||||")
            continue
        sl = "—" if r.get("chain_vs_sl") is None else f"{r['chain_vs_sl']:.3f}"
        print(f"| {r['problem']} | {r['model']} | {r['N']} | {r['D']} | {r['B']} | {'yes' if r['applicable'] else '**no**'} "
              f"| {r['deviation']:.3g} | {r['ratio']:.3g} | {r['curvature']:.3g} | {r['chain_dev']:.3g} ± {r['chain_se']:.2g} "
              f"| {sl} | {'pass' if r['passed_5pct'] else 'FAIL'} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--table"]:
        table(sys.argv[2])
    else:
        main(sys.argv[1:] or None)
