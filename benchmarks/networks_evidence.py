"""What sgtune says about networks and multiclass models, and how good its remedy's chain is.

One row per problem: the command a user would run, what sgtune says (applicable or not, and why), the
remedy it prints, and that remedy's chain error measured with independent chains — the relative
Frobenius error ‖Σ̂ − Σ*‖_F/‖Σ*‖_F of the chains' covariance Σ̂ against the remedy's target covariance
Σ* (from its ``sgtune lambda`` JSON), ± a jackknife-over-chains Monte Carlo standard error. The chains
are sgtune's own sampler (``sgtune run --lambda``), not sgtune's prediction.

The remedy is read from the JSON and followed as a user would: its ``remedies`` (a list of ``{why, argv,
expect}``, top level or in ``applicability``), the first whose ``expect`` is ``applicable`` (else the first
printed), run as printed with its own applicability report, and so on until a report is applicable or
nothing more is printed (at most 3 remedies); the chain measured is the last command's. Only when nothing
is printed is a command chosen by hand (the network's last layer at the fitted weights), and the row says
so. An applicable command is its own "remedy": its chain is measured as printed.

Run: python benchmarks/networks_evidence.py [PROBLEM ...] [--keep DIR]   (several minutes on one core;
without PROBLEM writes benchmarks/results/networks_evidence.md and .json; --keep DIR keeps the work files
in DIR and reuses the output of a command already run there with the same arguments). Needs
scikit-learn and torch (CPU).
"""
from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
HAND = "(remedy chosen by hand: sgtune printed no runnable remedy)"
#: options of ``sgtune lambda`` that take no value
FLAGS = {"--intercept", "--without-replacement", "--no-applicability", "--overwrite", "-q", "--quiet", "--strict"}
#: options of ``sgtune lambda`` that ``sgtune run`` does not take (the tuning's, and outputs)
LAMBDA_ONLY = {"--target", "--method", "--family", "--blocks", "--refine", "--no-applicability", "--plot",
               "-o", "--output", "--json", "--overwrite", "--strict", "-q", "--quiet"}
CHAINS = 8


def std(a):
    s = a.std(0)
    s[s == 0] = 1.0
    return (a - a.mean(0)) / s


# ----------------------------------------------------------------------------- the problems' data

def diabetes(work):
    from sklearn.datasets import load_diabetes
    d = load_diabetes()
    np.savez(work / "diabetes.npz", X=std(d.data), y=std(d.target[:, None])[:, 0])
    return work / "diabetes.npz"


def sine(work):
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(200, 1))
    np.savez(work / "sine.npz", X=x, y=np.sin(x[:, 0]) + 0.1 * rng.standard_normal(200))
    return work / "sine.npz"


def digits_pca(work, k=5):
    """The digits' first k principal components, standardised; y the class 0..9."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA
    d = load_digits()
    Z = PCA(k, random_state=0).fit_transform(d.data)
    np.savez(work / "digits_pca.npz", X=std(Z), y=d.target.astype(float))
    return work / "digits_pca.npz"


def digits_features(work, hidden=5, steps=300):
    """A seeded 64-5-10 tanh network trained on the digits (CPU, one thread); its body's features."""
    import torch
    from sklearn.datasets import load_digits
    torch.manual_seed(0)
    torch.set_num_threads(1)
    d = load_digits()
    X = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(X), y).backward()
        opt.step()
    with torch.no_grad():
        acc = float((net(X).argmax(1) == y).float().mean())
        phi = net[:-1].double()(X.double()).numpy()
    np.save(work / "digits_phi.npy", phi)
    np.savez(work / "digits.npz", X=d.data / 16.0, y=d.target.astype(float))
    return work / "digits.npz", work / "digits_phi.npy", acc


def problems(work):
    """name → (description, the user's argv)."""
    post = ["--target", "posterior", "--inverse-temperature", "2N"]
    data_d, data_s, data_p = diabetes(work), sine(work), digits_pca(work)
    data_n, phi, acc = digits_features(work)
    return {
        "diabetes-mlp8": ("scikit-learn diabetes (N = 442, 10 covariates and y standardised), an 8-unit tanh "
                          "network (D = 97), Gaussian likelihood σ² = 0.5, prior precision 1, B = 32",
                          ["sgtune", "lambda", str(data_d), "--model", "mlp", "--hidden-sizes", "8",
                           "--noise-variance", "0.5", "--prior-precision", "1", "--batch-size", "32", *post]),
        "digits-softmax": ("scikit-learn digits (N = 1797, 10 classes) on 5 standardised principal components, "
                           "softmax regression, full layout (D = 60), prior precision 1, B = 32",
                           ["sgtune", "lambda", str(data_p), "--model", "multinomial", "--layout", "full",
                            "--intercept", "--prior-precision", "1", "--batch-size", "32", *post]),
        "digits-last-layer": (f"the same digits, the 10-class output layer (D = 60) of a 64-5-10 tanh network "
                              f"trained with Adam for 300 steps (torch, seed 0; training accuracy {acc:.3f}), "
                              "prior precision 1, B = 32",
                              ["sgtune", "lambda", str(data_n), "--model", "last-layer", "--features", str(phi),
                               "--likelihood", "softmax", "--prior-precision", "1", "--batch-size", "32", *post]),
        "sine-mlp8": ("y = sin(x) + N(0, 0.1²), x ~ U(−3, 3), N = 200; an 8-unit tanh network (D = 25), "
                      "σ² = 0.01, prior precision 1, B = 20",
                      ["sgtune", "lambda", str(data_s), "--model", "mlp", "--hidden-sizes", "8",
                        "--noise-variance", "0.01", "--prior-precision", "1", "--batch-size", "20", *post]),
    }


# ----------------------------------------------------------------------------- running sgtune

def options(argv):
    """argv after ``sgtune CMD`` → (positional DATA or None, [(option, [values])])."""
    data, out, i = None, [], 2
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and "=" in a and a.startswith("--"):
            k, v = a.split("=", 1)
            out.append((k, [v]))
            i += 1
        elif a in FLAGS:
            out.append((a, []))
            i += 1
        elif a.startswith("-"):
            out.append((a, [argv[i + 1]]))
            i += 2
        else:
            data = a
            i += 1
    return data, out


def sgtune(argv, json_path, extra=()):
    """Run an ``sgtune`` argv with ``--json json_path``; (exit code, JSON or None, stderr)."""
    _, opts = options(argv)
    keep = [t for k, v in opts if k not in ("--json", "-o", "--output", "--overwrite") for t in (k, *v)]
    data, _ = options(argv)
    cmd = list(argv[:2]) + ([data] if data else []) + keep + ["--json", str(json_path), "--overwrite", *extra]
    stamp = Path(str(json_path) + ".argv")  # with --keep: reuse an earlier run of the same command
    said = " ".join(cmd).replace(str(Path(json_path).parent), "WORK")
    if stamp.exists() and json.loads(stamp.read_text())["cmd"] == said:
        old = json.loads(stamp.read_text())
        return old["rc"], json.loads(Path(json_path).read_text()) if Path(json_path).exists() else None, old["stderr"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    doc = json.loads(Path(json_path).read_text()) if Path(json_path).exists() and p.returncode in (0, 4) else None
    stamp.write_text(json.dumps({"cmd": said, "rc": p.returncode, "stderr": p.stderr}))
    return p.returncode, doc, p.stderr


def first_error(stderr):
    for line in stderr.splitlines():
        if line.startswith("Error:"):
            return line[len("Error:"):].strip()
    return stderr.strip().splitlines()[-1] if stderr.strip() else "failed"


def remedies_of(doc):
    """The JSON's remedies (a list of {why, argv}), top level first, then the applicability report's."""
    if not doc:
        return []
    for r in (doc.get("remedies"), (doc.get("applicability") or {}).get("remedies")):
        if r:
            return [x for x in r if isinstance(x, dict) and x.get("argv")]
    return []


def verdict(rc, doc, stderr):
    """(applicable: bool, what sgtune says)."""
    if rc not in (0, 4) or doc is None:
        return False, "error: " + first_error(stderr)
    a = doc.get("applicability") or {}
    if a.get("applicable"):
        return True, "applicable"
    reasons = a.get("reasons") or doc.get("warnings") or ["not applicable"]
    text = [r if isinstance(r, str) else r.get("message", str(r)) for r in reasons]
    return False, "not applicable: " + "; ".join(text)


def last_layer_by_hand(argv, doc, work, name):
    """The hand-chosen remedy for a network: its last layer at sgtune's fitted weights θ̂, same settings."""
    from sgtune.models.mlp import make_mlp
    data, opts = options(argv)
    o = dict((k, v[0] if v else True) for k, v in opts)
    mlp = make_mlp(o["--hidden-sizes"], activation=o.get("--activation", "tanh"))
    X = np.load(data)["X"]
    layers = mlp.unflatten(np.asarray(doc["theta_hat"], dtype=float), X.shape[1])
    h = X
    for W, b in layers[:-1]:
        h = np.tanh(h @ W.T + b)
    np.save(work / f"{name}_phi.npy", h)
    keep = [t for k, v in opts if k not in ("--model", "--hidden-sizes", "--activation", "--hessian", "--theta-hat")
            for t in (k, *v)]
    return ["sgtune", "lambda", data, "--model", "last-layer", "--features", str(work / f"{name}_phi.npy"),
            "--likelihood", "gaussian", *[t for t in keep if t not in ()]]


def larger_prior(argv, factor):
    """The same argv with --prior-precision multiplied by factor."""
    out = list(argv)
    i = out.index("--prior-precision")
    out[i + 1] = f"{float(out[i + 1]) * factor:g}"
    return out


def follow(argv, work, name, depth=3):
    """Follow the printed remedies as a user would, from the user's command: at each step the first remedy
    whose ``expect`` is ``applicable`` (else the first printed), run as printed with its own applicability
    report, until a report is applicable, nothing is printed, or ``depth`` remedies were followed.
    Returns the steps: {argv, why, expect, rc, doc, stderr, applicable, says, lam} (the first is the user's)."""
    steps, cur, why, expect = [], list(argv), None, None
    for i in range(depth + 1):
        lam = work / f"{name}_step{i}_lambda.npy"
        rc, doc, err = sgtune(cur, work / f"{name}_step{i}.json", extra=("-o", str(lam)))
        ok, said = verdict(rc, doc, err)
        steps.append({"argv": cur, "why": why, "expect": expect, "rc": rc, "doc": doc, "stderr": err,
                      "applicable": ok, "says": said, "lam": lam})
        rem = remedies_of(doc)
        if ok or not rem or i == depth:
            break
        pick = next((r for r in rem if r.get("expect") == "applicable"), rem[0])
        cur, why, expect = list(pick["argv"]), pick["why"], pick.get("expect")
    return steps


def chain_error(argv, work, name, step=None):
    """Run CHAINS chains of the Λ of ``argv`` (from ``step`` when it ran already, else tuned here without its
    report); relative Frobenius error against its target ± jackknife SE."""
    if step is not None:
        rc, doc, err = step["rc"], step["doc"], step["stderr"]
        lam = step["lam"]
    else:  # Λ and Σ* only (the hand-chosen remedy's report is not needed here)
        lam = work / f"{name}_lambda.npy"
        no_check = () if "--no-applicability" in argv else ("--no-applicability",)
        rc, doc, err = sgtune(argv, work / f"{name}_remedy.json", extra=("-o", str(lam), *no_check))
    if doc is None:
        return {"remedy_verdict": "error: " + first_error(err), "error": math.nan, "se": math.nan}
    said = "ran" if rc == 0 else "ran, untrusted"
    target = np.asarray(doc["target_cov"], dtype=float)
    tau = float(doc.get("tau_worst") or 100.0)
    burn = int(min(max(2_000, 10 * tau), 20_000))
    steps = burn + int(min(max(20_000, 100 * tau), 100_000))
    data, opts = options(argv)
    # the command's own --seed stays: it seeds the fit too (a network's L-BFGS start, so its θ̂ and, with
    # --features-from mlp, the features), and Λ is tuned for that fit; it also seeds the chains
    keep = [t for k, v in opts if k not in LAMBDA_ONLY and k != "--inverse-temperature" for t in (k, *v)]
    beta = doc["inverse_temperature"]
    run = ["sgtune", "run"] + ([data] if data else []) + keep + [
        "--lambda", str(lam), "--inverse-temperature", str(beta),
        "--steps", str(steps), "--burn-in", str(burn), "--chains", str(CHAINS)]
    rc, _, err = sgtune(run, work / f"{name}_run.json", extra=("-o", str(work / f"{name}_chains.npz"), "-q"))
    if rc not in (0, 4):
        return {"remedy_verdict": said, "error": math.nan, "se": math.nan, "run_error": first_error(err)}
    covs = np.load(work / f"{name}_chains.npz")["chain_covs"]
    rel = lambda S: float(np.linalg.norm(S - target) / np.linalg.norm(target))
    est = rel(covs.mean(0))
    jack = np.array([rel(np.delete(covs, c, axis=0).mean(0)) for c in range(len(covs))])
    se = float(np.sqrt((len(covs) - 1) / len(covs) * ((jack - jack.mean()) ** 2).sum()))
    return {"remedy_verdict": said, "error": est, "se": se, "steps": steps, "burn_in": burn, "chains": len(covs),
            "tau_worst": tau, "dim": int(target.shape[0]), "run_argv": run}


def row(name, desc, argv, work):
    steps = follow(argv, work, name)
    first, last = steps[0], steps[-1]
    ok, said, doc = first["applicable"], first["says"], first["doc"]
    followed = [{"why": st["why"], "argv": st["argv"], "expect": st["expect"], "applicable": st["applicable"],
                 "says": st["says"]} for st in steps[1:]]
    if ok:
        chosen, why, by_hand, step = argv, "none needed: the command as printed", False, first
    elif followed:
        chosen, why, by_hand, step = last["argv"], last["why"], False, last
    else:
        if doc is None:
            raise RuntimeError(f"{name}: no remedy printed and no JSON to choose one from: {said}")
        by_hand, step = True, None
        if "--hidden-sizes" in argv:
            chosen = last_layer_by_hand(argv, doc, work, name)
            why = "the network's last layer at the fitted weights (body frozen), same target and β"
        else:  # the first option of sgtune's prose ("a larger prior precision"), its value chosen by hand
            chosen = larger_prior(argv, 100.0)
            why = "a prior precision 100 times larger (the first option sgtune's prose names)"
    m = chain_error(chosen, work, name, step=step)
    printed = None
    if not math.isfinite(m["error"]) and not by_hand and "--hidden-sizes" in argv:
        # sgtune's printed remedy failed on real chains: say so, and measure the hand-chosen one as well
        printed = {"why": why, "argv": chosen, "failure": m.get("run_error", m["remedy_verdict"])}
        chosen = last_layer_by_hand(argv, doc, work, name)
        why, by_hand = "the network's last layer at the fitted weights (body frozen), same target and β", True
        m = chain_error(chosen, work, name + "-hand")
    return {"problem": name, "description": desc, "argv": argv, "applicable": ok, "sgtune_says": said,
            "remedy_why": why, "remedy_argv": chosen, "remedy_by_hand": by_hand, "printed_remedy_failed": printed,
            "followed": followed, "remedy_applicable": bool(step is not None and step["applicable"]), **m}


def short(argv, work):
    return shlex.join(a.replace(str(work) + "/", "") for a in argv)


COLUMNS = ["problem", "the command", "what sgtune says", "remedy (the chain measured)",
           "chain error ‖Σ̂ − Σ*‖_F/‖Σ*‖_F ± MC se"]


def cells(r, work):
    """One table row of cells (Markdown), from a result row."""
    esc = lambda t: t.replace("|", "\\|")
    if r["applicable"]:
        rem = "none needed (applicable): the command's own chain"
    elif r.get("followed"):
        rem = " → then ".join(f"sgtune printed{' (expect: applicable)' if f['expect'] == 'applicable' else ''}: "
                              f"{f['why']}: `{short(f['argv'], work)}` — its report: {f['says']}"
                              for f in r["followed"])
    else:
        rem = f"{r['remedy_why']}: `{short(r['remedy_argv'], work)}`" + (f" {HAND}" if r["remedy_by_hand"] else "")
        bad = r.get("printed_remedy_failed")
        if bad:
            rem = (f"sgtune printed: {bad['why']}: `{short(bad['argv'], work)}` — its chains failed ({bad['failure']}). "
                   f"Measured instead, chosen by hand: {r['remedy_why']}: `{short(r['remedy_argv'], work)}`")
    err = (f"{r['error']:.3f} ± {r['se']:.3f} ({r.get('chains', 0)} chains × {r.get('steps', 0):,} steps, "
           f"burn-in {r.get('burn_in', 0):,})")
    return [f"**{r['problem']}**: {r['description']}", f"`{short(r['argv'], work)}`", esc(r["sgtune_says"]),
            esc(rem), err]


def markdown(columns, rows):
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join(["---"] * len(columns)) + "|"]
    return "\n".join(out + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def main():
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    RESULTS.mkdir(exist_ok=True)
    args = sys.argv[1:]
    keep = args[args.index("--keep") + 1] if "--keep" in args else None
    write = "--write" in args  # store the results of a subset of the problems too
    only = set(a for a in args if a not in ("--keep", "--write") and a != keep)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows = []
        for name, (desc, argv) in problems(work).items():
            if only and name not in only:
                continue
            r = row(name, desc, argv, work)
            print(json.dumps({k: r[k] for k in ("problem", "applicable", "sgtune_says", "error", "se")}), flush=True)
            rows.append(r)
        table = [cells(r, work) for r in rows]
        for r in rows:
            for k in ("argv", "remedy_argv", "run_argv"):
                if k in r:
                    r[k] = [a.replace(str(work) + "/", "") for a in r[k]]
            for f in r["followed"]:
                f["argv"] = [a.replace(str(work) + "/", "") for a in f["argv"]]
            if r["printed_remedy_failed"]:
                r["printed_remedy_failed"]["argv"] = [a.replace(str(work) + "/", "")
                                                      for a in r["printed_remedy_failed"]["argv"]]
    md = markdown(COLUMNS, table)
    print(md)
    if write or not only:
        doc = {"tables": {"evidence": {
            "command": "python benchmarks/networks_evidence.py",
            "measured": (f"sgtune's sampler (sgtune run --lambda), {CHAINS} independent chains per row, one thread; "
                         "Σ* is the remedy's target covariance from its sgtune lambda JSON; "
                         "± is the jackknife-over-chains standard error"),
            "columns": COLUMNS, "rows": table}}, "rows": rows}
        (RESULTS / "networks_evidence.md").write_text(md)
        (RESULTS / "networks_evidence.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
