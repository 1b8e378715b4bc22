"""`ci-autoscaler demo` end to end: the whole world on 127.0.0.1, as a newcomer runs it.

Story: the demo promised queues rising and draining, pools
growing, idle runners scaled in, alerts FIRING then RESOLVED, a GPU spot failover and no
busy runner killed, but its test asserted neither a RESOLVED nor a scale-in, and in 60 s
the demo never showed a scale-in at all. Piped (as here), the output must be plain text
a person can read: no terminal escapes, no log lines or tracebacks on stderr.
It also says why jobs wait, in a panel and on each queue alert's Cause line.
"""

from __future__ import annotations

import re
import subprocess
import sys

PROMISES = (
    "queues rose",
    "pools grew",
    "queues drained",
    "idle runners scaled in",
    "alerts FIRING then RESOLVED",
    "GPU spot out of capacity -> on-demand",
    "no busy runner killed",
    "why jobs wait named (capacity_backoff, at_max, no_runner_type)",
)


def test_demo_shows_every_promise_of_the_readme_and_sums_it_up() -> None:
    """60 s: the shortest run whose checklist the docs promise. At 45 s the queues had not
    drained yet when the demo shared the machine with the rest of the suite."""
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler", "demo", "--duration", "60", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr == "", "log lines or tracebacks leaked to stderr:\n" + result.stderr
    assert "\x1b[" not in out, "terminal escapes in piped output"
    # A newcomer never watches a silent terminal while moto and the fakes start.
    start = out.split("ready: the status page is", 1)[0]
    for step in ("fake GitHub on http://127.0.0.1:", "moto on http://127.0.0.1:", "controller"):
        assert step in start, f"no start-up line about {step}:\n{start}"

    summary = out.rsplit("summary after", 1)[1]
    for promise in PROMISES:
        assert re.search(rf"^    \[x\] {re.escape(promise)}", summary, re.MULTILINE), (
            f"not shown: {promise}\n{summary}"
        )
    numbers = re.search(
        r"jobs run: (\d+) finished .*p95 queue time: ([\d.]+)s\n"
        r"  scale-ups: (\d+); scale-ins: (\d+); orphans cleaned: \d+; failovers: (\d+)\n"
        r"  alerts: (\d+) fired, (\d+) resolved(?: \(.*\))?; busy runners killed: 0",
        summary,
    )
    assert numbers, summary
    jobs, _p95, ups, ins, failovers, fired, resolved = map(float, numbers.groups())
    assert jobs > 0 and ups > 0 and ins > 0 and failovers > 0 and fired > 0 and resolved > 0
    # The fake GitHub sends signed webhooks; queued jobs are answered by scale-ups
    # at once (how fast is the benchmark's to say, not a timed test's).
    answered = re.search(r"  webhooks: (\d+) queued jobs answered by a scale-up; ", summary)
    assert answered and int(answered.group(1)) > 0, summary
    # Where the waits went: the stage table, and the histogram on /metrics.
    table = summary.split("where the waits went (median / p95 seconds", 1)[1]
    header = table.splitlines()[1].split()
    assert header[-7:] == [
        "github_lag",
        "decision",
        "launch",
        "boot",
        "assignment",
        "queue",
        "time",
    ]
    rows = re.findall(r"^  (linux\.\S+) +(\d+) ", table, re.MULTILINE)
    assert rows and all(int(jobs) > 0 for _, jobs in rows), table
    stages = re.search(r"has all 5 stages for (\d+) runner type", summary)
    assert stages and int(stages.group(1)) >= 1, summary

    # The story as it scrolled by: the tables, the failover, FIRING then RESOLVED of the
    # same alert, and scale-ins as the controller logged them.
    assert "RUNNER TYPE" in out and "linux.g5.4xlarge.nvidia.gpu" in out
    assert "POOL" in out and "INSTANCES" in out and "DESIRED" in out
    assert "pool ci-gpu-spot failed to launch" in out
    assert re.search(r"scaled up ci-gpu-ondemand \(linux\.g5\.4xlarge\.nvidia\.gpu\)", out)
    title = r"(\[P2\] [^|\n]+?)(?: \| Cause: .*)?$"  # a queue alert's line ends with its cause
    fired_titles = set(re.findall("FIRING: " + title, out, re.MULTILINE))
    resolved_titles = set(re.findall("RESOLVED: " + title, out, re.MULTILINE))
    assert fired_titles & resolved_titles, (fired_titles, resolved_titles)
    assert re.search(r"scaled in ci-\S+: runner \S+ deregistered, instance i-\S+ terminated", out)

    # Why jobs wait, in the causes panel and on the alert: spot
    # out of capacity with the pool and AWS's message, CPU at its max, a label nobody
    # serves. The outage is AWS's real capacity StatusMessage: classified as capacity
    # (backed off, failed over), not as a launch a person must fix.
    gpu = r"linux\.g5\.4xlarge\.nvidia\.gpu"
    aws_said = r"AWS: InsufficientInstanceCapacity: Could not launch Spot Instances"
    assert re.search(  # the panel's lines are cut at 160 characters: AWS's code shows
        gpu + r": \d+ queued\n    capacity_backoff: ci-gpu-spot since [^\n]*"
        r"Failed scaling activity, AWS: InsufficientInstanceCapacity",
        out,
    ), "no capacity_backoff for the GPU type"
    assert re.search(r"    at_max: linux\.(4|2)xlarge \d+/\d+ instances", out), "no at_max"
    assert re.search(r"no_runner_type: \d+ queued jobs? no runner type serves, by labels:", out)
    assert "[linux.arm64.nobody-serves-this, self-hosted]" in out
    assert re.search(
        r"\[P2\] Jobs queueing too long \(" + gpu + r"\)[^\n]*\n?[ ]*\| Cause: capacity_backoff"
        r" \(ci-gpu-spot since [^;]*; Failed scaling activity, " + aws_said,
        out,
    ), "the GPU queue alert does not say capacity_backoff"
    assert "permanent_error" not in out and "launch refused" not in out
