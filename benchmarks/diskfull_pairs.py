"""The pair-of-outputs property on a real full disk (issue 37): 50 trials of `sgtune lambda -o L.npy --json L.json
--overwrite` over an older pair on a small tmpfs filled to a random level; the pair must stay both old or become
both new, with no temporary left. Needs a tmpfs at /tmp/tfs (as root: `mount -t tmpfs -o size=96k tmpfs /tmp/tfs`).
Usage: python benchmarks/diskfull_pairs.py SEED. Measured 2026-11-29: 23 new pairs, 27 refused, 0 inconsistent,
0 leftovers (seed 2). The test suite checks the same property with a simulated full disk (tests/_disk_full.py)."""
import json, os, random, subprocess, sys, glob
D = "/tmp/tfs"
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
def run(B):
    return subprocess.run(["sgtune", "lambda", "--example", "logistic", "--batch-size", str(B), "--target", "sandwich",
                           "-o", f"{D}/L.npy", "--json", f"{D}/L.json", "--overwrite", "-q", "--no-applicability"],
                          capture_output=True, text=True)
bad = leftovers = full = ok_new = 0
for trial in range(50):
    for f in glob.glob(f"{D}/*") + glob.glob(f"{D}/.*"):
        os.remove(f)
    r = run(8); assert r.returncode == 0, r.stderr
    old_json = json.load(open(f"{D}/L.json")); old_npy = open(f"{D}/L.npy","rb").read()
    st = os.statvfs(D); free = st.f_bavail * st.f_frsize
    leave = rng.randint(0, 24000)
    if free - leave > 0:
        with open(f"{D}/filler", "wb") as fh:
            try:
                fh.write(b"\0" * (free - leave))
            except OSError:
                pass
    r = run(64)
    doc = json.load(open(f"{D}/L.json"))
    npy = open(f"{D}/L.npy", "rb").read()
    B = doc.get("batch_size")
    same_as_old = doc == old_json and npy == old_npy
    if r.returncode == 0:
        ok_new += 1
        if B != 64 or npy == old_npy: bad += 1  # the new sidecar beside the old Λ
    else:
        full += 1
        if not same_as_old: bad += 1; print("changed json on failure", r.stderr[-300:])
    tmps = [f for f in os.listdir(D) if f not in ("L.npy", "L.json", "filler")]
    if tmps: leftovers += 1; print("leftover", tmps)
    if trial < 3 or r.returncode: print(trial, "rc", r.returncode, "B", B, r.stderr.strip().splitlines()[-1][:160] if r.stderr.strip() else "")
print(f"trials 50: new pair {ok_new}, refused (disk full) {full}, inconsistent {bad}, leftovers {leftovers}")
