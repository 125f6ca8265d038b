"""A/B of two bulwark binaries on the open-loop overload experiment: runs
`BIN chaos overload --target local --overload-runs RUNS` for each binary in turn, PAIRS
times, flipping the order every pair (the host's speed drifts within minutes, so neither
build may always go first), and prints one line per run and the medians per build and
setup. Prints figures; asserts nothing.

Why a script: on the shared 2-core machines C moves by 20-30% within seconds and one run
of a setup says little, so every figure in docs/overload.md since 2026-12-04 is a median
of alternating runs like these. Besides the goodput fraction it prints what does not
depend on C: lookups served a second in the burst, and the cluster's CPU per lookup in the
closed loop and at half load.

    python3 scripts/measure/overload-ab.py NEW_BIN OLD_BIN [PAIRS] [RUNS] [OUT_DIR]

PAIRS defaults to 3, RUNS to 3,4 (the CSOT-like client setups), OUT_DIR to
target/overload-ab (each run's report JSON and output are kept there; a run that fails
is reported and left out).
"""
import json
import os
import statistics
import subprocess
import sys


def run(binary, runs, report):
    """One invocation's runs; none when it failed, whose output (kept next to the report
    either way) is then printed in part, so that one failed run does not end the A/B."""
    log = report.removesuffix(".json") + ".log"
    with open(log, "w") as out:
        done = subprocess.run(
            [binary, "chaos", "overload", "--target", "local", "--overload-runs", runs,
             "--report", report],
            stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        with open(log) as f:
            tail = f.readlines()[-15:]
        print(f"{binary} failed (exit {done.returncode}); the end of {log}:", flush=True)
        print("".join(tail), flush=True)
        return []
    with open(report) as f:
        return json.load(f)["runs"]


def summary(r):
    """The figures of one run that the A/B compares."""
    burst = [s for s in r["per_sec"] if s["phase"] == "burst"]
    low = [s for s in r["per_sec"] if s["phase"].startswith("low")]
    low_ok = sum(s["succeeded"] for s in low)
    low_cpu = sum(s["router_cpu_ms"] + s["members_cpu_ms"] for s in low)
    return {
        "goodput": r["goodput_fraction"],
        "C": r["capacity_ops"],
        "steady": r["capacity_steady"],
        "burst_ok_per_s": statistics.mean(s["succeeded"] for s in burst),
        "burst_refused_per_s": statistics.mean(s["shed"] for s in burst),
        # No refusal-cost phase runs with the protections off (setups 2 and 5).
        "closed_us": (r["refusal_cost"] or {}).get("served_us", float("nan")),
        "half_load_us": 1000.0 * low_cpu / low_ok if low_ok else float("nan"),
    }


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    builds = {"new": sys.argv[1], "old": sys.argv[2]}
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    runs = sys.argv[4] if len(sys.argv) > 4 else "3,4"
    out = sys.argv[5] if len(sys.argv) > 5 else "target/overload-ab"
    os.makedirs(out, exist_ok=True)
    results = {}
    for pair in range(1, pairs + 1):
        order = ["new", "old"] if pair % 2 else ["old", "new"]
        for build in order:
            report = os.path.join(out, f"{build}.{pair}.json")
            for r in run(builds[build], runs, report):
                s = summary(r)
                results.setdefault((r["label"], build), []).append(s)
                print(f"pair {pair} {build}: {r['label']}: goodput {s['goodput']:.3f} of C "
                      f"{s['C']:.0f} (steady {s['steady']}), burst served "
                      f"{s['burst_ok_per_s']:.0f}/s refused {s['burst_refused_per_s']:.0f}/s, "
                      f"CPU per lookup {s['closed_us']:.1f} µs closed loop, "
                      f"{s['half_load_us']:.0f} µs at half load", flush=True)
    print("medians:")
    for (label, build), rows in sorted(results.items()):
        med = {k: statistics.median(x[k] for x in rows) for k in rows[0] if k != "steady"}
        print(f"  {label}, {build} (runs: {len(rows)}): goodput {med['goodput']:.3f}, C "
              f"{med['C']:.0f}, burst served {med['burst_ok_per_s']:.0f}/s, CPU per lookup "
              f"{med['closed_us']:.1f} µs closed loop, {med['half_load_us']:.0f} µs at half load")


if __name__ == "__main__":
    main()
