"""A fleet emulator: EC2 instances in Auto Scaling groups become runners in a fake GitHub.

Each :meth:`Fleet.tick` (time passed in, so a virtual clock works) reads the groups through
a boto3 client (moto's server, usually) and:

- registers a runner named ``f"{pool}-{instance_id}"`` with its type's labels for every
  instance that has been up ``boot_delay`` seconds, the way the runner-pool module's boot
  script does: an ephemeral instance connects with the JIT config the controller left in
  SSM; a persistent one claims the registration token the controller left there (it
  deletes the parameter, and registers only when that delete succeeded). Instances in
  ``never_boot`` never do: they become orphans for the controller to clean up;
- hands each idle runner of ours a queued job it can run (its labels cover the job's),
  and completes the job ``job_duration`` seconds later;
- removes the runner of an instance that is gone. A runner that was still busy then is
  counted in :attr:`Fleet.busy_terminations` (the controller must keep that at 0);
- notices runners the controller deregistered (a scale-in): their instance never
  registers again.

Also here: :func:`start_moto_server` (moto on 127.0.0.1), :func:`moto_session` (boto3
with dummy credentials) and :func:`create_pools` (a launch template and an Auto Scaling
group per pool), for the demo and the tests.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import boto3

from autoscaler.domain import normalize_labels
from autoscaler.fakes.github import FakeGitHub

log = logging.getLogger(__name__)

AMI_ID = "ami-12c6146b"  # one of moto's built-in images
_LIVE = ("Pending", "Pending:Wait", "Pending:Proceed", "InService")


@dataclass(frozen=True)
class PoolSpec:
    """One Auto Scaling group serving a runner type."""

    name: str
    runner_type: str
    labels: tuple[str, ...]
    max_size: int = 10
    min_size: int = 0
    instance_type: str = "t3.micro"
    ephemeral: bool = False
    """Its instances boot like the runner-pool module's ephemeral boot script: read their
    JIT config from SSM, connect once, take one job; GitHub then removes the runner."""


def start_moto_server(port: int = 0, *, atomic: bool = False) -> tuple[Any, str]:
    """moto's server on 127.0.0.1 (port 0: any free port). Returns (server, endpoint url).

    ``atomic``: one request at a time. DynamoDB applies a conditional write atomically;
    moto's threaded server checks the condition and writes in two steps another request
    can fall between (seen: two concurrent ``attribute_not_exists`` puts of the lease both
    succeeded). Tests with several controllers on one table need DynamoDB's behaviour.

    Stop it with ``server.stop()``. moto is a development dependency: imported here only.
    """
    from moto.server import ThreadedMotoServer  # noqa: PLC0415

    if atomic:
        server: Any = _atomic_server_class()(ip_address="127.0.0.1", port=port, verbose=False)
    else:
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    return server, f"http://{host}:{bound}"


def _atomic_server_class() -> type[Any]:
    """ThreadedMotoServer whose app runs one request at a time (see start_moto_server)."""
    import threading  # noqa: PLC0415

    from moto.moto_server.werkzeug_app import (  # noqa: PLC0415
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from moto.server import ThreadedMotoServer  # noqa: PLC0415
    from werkzeug.serving import make_server  # noqa: PLC0415

    class AtomicMotoServer(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = DomainDispatcherApplication(create_backend_app)
            lock = threading.Lock()

            def one_at_a_time(environ: Any, start_response: Any) -> Any:
                with lock:  # moto builds the whole answer inside the call
                    return app(environ, start_response)

            self._server = make_server(
                self._ip_address,
                self._port,
                one_at_a_time,
                True,
                request_handler=MotoRequestHandler,
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    return AtomicMotoServer


def reset_moto_server(endpoint_url: str) -> None:
    """Forget every resource (moto keeps state per process, across server instances)."""
    if not endpoint_url.startswith("http://127.0.0.1:"):
        raise ValueError("only a moto server on 127.0.0.1 is reset")
    url = f"{endpoint_url}/moto-api/reset"
    request = urllib.request.Request(url, method="POST")  # noqa: S310 (loopback http only)
    with urllib.request.urlopen(request, timeout=10):  # noqa: S310
        pass


#: One botocore loader for every session :func:`moto_session` makes (see there).
_LOADER: list[Any] = []


def moto_session(region: str = "us-east-1") -> boto3.session.Session:
    """A boto3 session with dummy credentials, for moto.

    The sessions made here share one botocore loader: a new session otherwise parses each
    service's model again (EC2's is megabytes of JSON, half a second of CPU), and the demo
    and the tests make hundreds of sessions."""
    import botocore.loaders  # noqa: PLC0415
    import botocore.session  # noqa: PLC0415

    if not _LOADER:
        _LOADER.append(botocore.loaders.create_loader())
    core = botocore.session.Session()
    core.register_component("data_loader", _LOADER[0])
    return boto3.session.Session(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # noqa: S106 (moto accepts any)
        region_name=region,
        botocore_session=core,
    )


def aws_clients(endpoint_url: str | None, region: str = "us-east-1") -> tuple[Any, Any]:
    """(autoscaling, ec2) clients with dummy credentials, for moto."""
    session = moto_session(region)
    return (
        session.client("autoscaling", endpoint_url=endpoint_url),
        session.client("ec2", endpoint_url=endpoint_url),
    )


def ssm_client(endpoint_url: str | None, region: str = "us-east-1") -> Any:
    """An SSM client with dummy credentials, for moto: what the fleet's instances read their
    credential with."""
    return moto_session(region).client("ssm", endpoint_url=endpoint_url)


def create_pools(
    autoscaling: Any, ec2: Any, specs: Sequence[PoolSpec], zone: str = "us-east-1a"
) -> None:
    """A launch template and an empty Auto Scaling group (new instances protected) per pool."""
    for spec in specs:
        template = f"lt-{spec.name}"
        ec2.create_launch_template(
            LaunchTemplateName=template,
            LaunchTemplateData={"ImageId": AMI_ID, "InstanceType": spec.instance_type},
        )
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=spec.name,
            LaunchTemplate={"LaunchTemplateName": template, "Version": "$Latest"},
            MinSize=spec.min_size,
            MaxSize=spec.max_size,
            DesiredCapacity=spec.min_size,
            AvailabilityZones=[zone],
            NewInstancesProtectedFromScaleIn=True,
        )


@dataclass
class _Booted:
    runner_id: int
    pool: str
    job_id: int | None = None
    job_done_at: datetime | None = None
    ran: bool = False
    """It took a job (an ephemeral runner takes one, ever)."""


@dataclass
class FleetEvents:
    """What one tick did (for logs and assertions)."""

    registered: list[str] = field(default_factory=list)
    assigned: list[int] = field(default_factory=list)
    waited: list[float] = field(default_factory=list)
    """Queue time in seconds of each job in :attr:`assigned` (``now - created_at``)."""
    completed: list[int] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    """Runners whose instance went away while they were still registered."""
    deregistered: list[str] = field(default_factory=list)
    """Runners the controller deregistered (a scale-in); their instance goes next."""


class Fleet:
    """Turns launched instances into runners, runs jobs on them, and cleans up."""

    def __init__(
        self,
        github: FakeGitHub,
        autoscaling: Any,
        specs: Sequence[PoolSpec],
        *,
        boot_delay: float = 20.0,
        job_duration: float | Callable[[int], float] = 60.0,
        ssm: Any = None,
        parameter_path: str = "/ci-autoscaler/jit",
    ) -> None:
        self.github = github
        self.autoscaling = autoscaling
        self.specs = {s.name: s for s in specs}
        self.boot_delay = boot_delay
        self.job_duration = job_duration
        self.never_boot: set[str] = set()
        """Instance ids that never register (to make orphans on purpose)."""
        self.busy_terminations = 0
        self.live_instances: dict[str, int] = {}
        """Pool -> instances in service or booting, as of the last tick."""
        self._first_seen: dict[str, datetime] = {}
        self._booted: dict[str, _Booted] = {}  # instance id -> its runner
        self._retired: set[str] = set()  # instances whose runner was deregistered
        #: SSM client (moto's) instances read their credential from.
        self.ssm = ssm
        self.parameter_path = parameter_path
        self.jit_refused = 0
        """Ephemeral instances whose config GitHub refused (used already, runner deleted):
        they never get a runner (the controller cleans them up)."""
        self.token_refused = 0
        """Persistent instances whose token was withdrawn before they claimed it, or that
        GitHub refused (expired): they never get a runner (the controller cleans them up)."""

    def _instances(self) -> dict[str, str]:
        """Live instance id -> pool, for our pools."""
        out: dict[str, str] = {}
        kwargs: dict[str, Any] = {"AutoScalingGroupNames": list(self.specs)}
        while True:
            page = self.autoscaling.describe_auto_scaling_groups(**kwargs)
            for group in page.get("AutoScalingGroups", []):
                for inst in group.get("Instances", []):
                    if inst.get("LifecycleState") in _LIVE:
                        out[inst["InstanceId"]] = group["AutoScalingGroupName"]
            if not page.get("NextToken"):
                return out
            kwargs["NextToken"] = page["NextToken"]

    def _read(self, pool: str, iid: str) -> str | None:
        """The instance's parameter, or None while the controller has not written it."""
        if self.ssm is None:
            raise ValueError(f"pool {pool}: the fleet needs an ssm client")
        name = f"{self.parameter_path}/{pool}/{iid}"
        try:
            value = self.ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
        except self.ssm.exceptions.ParameterNotFound:
            return None
        return str(value)

    def _register(self, pool: str, iid: str) -> int | None:
        """The boot script of a persistent instance: its token (none yet: try again next
        tick), claimed by deleting the parameter, then ``config.sh --token``. Returns the
        runner id, or None."""
        token = self._read(pool, iid)
        if token is None:
            return None
        assert self.ssm is not None
        try:
            self.ssm.delete_parameter(Name=f"{self.parameter_path}/{pool}/{iid}")
        except self.ssm.exceptions.ParameterNotFound:
            self._refused(iid, "its registration token was withdrawn")
            return None
        try:
            return self.github.register_with_token(token, f"{pool}-{iid}", self.specs[pool].labels)
        except ValueError:
            self._refused(iid, "GitHub refused its registration token")
            return None

    def _refused(self, iid: str, why: str) -> None:
        self.token_refused += 1
        self._retired.add(iid)  # the boot script gives up; the controller cleans up
        log.warning("instance %s: %s", iid, why)

    def _connect(self, pool: str, iid: str) -> int | None:
        """The boot script of an ephemeral instance: its parameter (none yet: try again next
        tick), then ``run.sh --jitconfig`` once. Returns the runner id, or None."""
        value = self._read(pool, iid)
        if value is None:
            return None
        try:
            return self.github.connect_jit(str(value))
        except ValueError:
            self.jit_refused += 1
            self._retired.add(iid)  # the boot script gives up; the controller cleans up
            log.warning("instance %s: its JIT config was refused", iid)
            return None

    def _duration(self, job_id: int) -> float:
        d = self.job_duration
        return d(job_id) if callable(d) else d

    def tick(self, now: datetime) -> FleetEvents:
        events = FleetEvents()
        live = self._instances()
        self.live_instances = {pool: 0 for pool in self.specs}
        for pool in live.values():
            self.live_instances[pool] += 1
        runners = {r.id: r for r in self.github.runners()}
        # Instances gone: remove their runners.
        for iid in [i for i in self._booted if i not in live]:
            booted = self._booted.pop(iid)
            runner = runners.get(booted.runner_id)
            if runner is None:  # deregistered first, then terminated: a clean scale-in
                events.deregistered.append(f"{booted.pool}-{iid}")
                continue
            if runner.busy:
                self.busy_terminations += 1
                log.error("instance %s terminated while its runner was busy", iid)
                if booted.job_id is not None:
                    self.github.complete_job(booted.job_id)
            self.github.remove_runner(booted.runner_id)
            events.removed.append(runner.name)
        # Runners deregistered by the controller: their instance never registers again.
        for iid, booted in list(self._booted.items()):
            if booted.runner_id not in runners:
                self._retired.add(iid)
                del self._booted[iid]
                events.deregistered.append(f"{booted.pool}-{iid}")  # instance goes next
        # Jobs that are done.
        for booted in self._booted.values():
            if (
                booted.job_id is not None
                and booted.job_done_at is not None
                and now >= booted.job_done_at
            ):
                self.github.complete_job(booted.job_id)
                events.completed.append(booted.job_id)
                booted.job_id = booted.job_done_at = None
        # Ephemeral runners that ran their job are gone (GitHub removed them): their
        # instance never takes another one; the controller terminates it.
        for iid, booted in list(self._booted.items()):
            if self.specs[booted.pool].ephemeral and booted.job_id is None and booted.ran:
                self._retired.add(iid)
                del self._booted[iid]
        # Instances that finished booting.
        for iid, pool in live.items():
            first = self._first_seen.setdefault(iid, now)
            if iid in self._booted or iid in self._retired or iid in self.never_boot:
                continue
            if now - first >= timedelta(seconds=self.boot_delay):
                name = f"{pool}-{iid}"
                boot = self._connect if self.specs[pool].ephemeral else self._register
                connected = boot(pool, iid)
                if connected is None:
                    continue
                rid = connected
                self._booted[iid] = _Booted(rid, pool)
                events.registered.append(name)
        # Idle runners pick queued jobs their labels cover, oldest first.
        queued = sorted(self.github.queued_jobs(), key=lambda j: (j.created_at, j.id))
        for booted in self._booted.values():
            if booted.job_id is not None or not queued:
                continue
            labels = normalize_labels(self.specs[booted.pool].labels)
            job = next((j for j in queued if normalize_labels(j.labels) <= labels), None)
            if job is None:
                continue
            queued.remove(job)
            self.github.assign_job(job.id, booted.runner_id)
            booted.job_id, booted.ran = job.id, True
            booted.job_done_at = now + timedelta(seconds=self._duration(job.id))
            events.assigned.append(job.id)
            events.waited.append(max(0.0, (now - job.created_at).total_seconds()))
        return events
