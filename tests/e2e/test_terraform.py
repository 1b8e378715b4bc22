"""terraform/: formatted, valid offline against the local provider mirror, a task role
that grants exactly the AWS calls the pool adapter and the state table make (the table's
calls on that table only), and a state table with exactly the schema
`ci-autoscaler state create-table` creates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hcl2
import pytest

from autoscaler.job_retry.interruptions import (
    ASG_TERMINATED,
    REBALANCE_RECOMMENDATION,
    SPOT_WARNING,
    STATE_CHANGE,
)
from autoscaler.scale.aws.asg import IAM_ACTIONS
from autoscaler.scale.aws.sqs import SQS_IAM_ACTIONS
from autoscaler.scale.aws.ssm import IAM_ACTIONS as SSM_IAM_ACTIONS
from autoscaler.scale.aws.ssm import IAM_LIST_ACTION as SSM_IAM_LIST_ACTION
from autoscaler.scale.aws.ssm import INSTANCE_TAG
from autoscaler.state.dynamodb_table import IAM_ACTIONS as STATE_IAM_ACTIONS
from autoscaler.state.dynamodb_table import SCHEMA, TableSchema
from tests.conftest import require_tool
from tests.e2e.terraform_support import (
    TERRAFORM_DIR,
    copy_tree,
    init,
    require_provider_mirror,
    run,
    terraform_env,
)

pytestmark = pytest.mark.e2e

CONTROLLER_MAIN = TERRAFORM_DIR / "modules" / "controller" / "main.tf"
CONTROLLER_INTERRUPTIONS = TERRAFORM_DIR / "modules" / "controller" / "interruptions.tf"
SCOPED_SERVICES = ("autoscaling:", "ec2:")
MANAGED_CONDITION_KEYS = (
    "aws:ResourceTag/ci-autoscaler:managed",
    "autoscaling:ResourceTag/ci-autoscaler:managed",
)
ROOTS = sorted(
    p.relative_to(TERRAFORM_DIR).as_posix()
    for kind in ("modules", "examples")
    for p in (TERRAFORM_DIR / kind).iterdir()
    if p.is_dir()
)


def test_every_module_and_example_is_present() -> None:
    assert {"modules/runner-pool", "modules/controller", "examples/complete"} <= set(ROOTS)
    for root in ROOTS:
        assert (TERRAFORM_DIR / root / "README.md").is_file(), f"{root} has no README.md"


def test_fmt_check(tmp_path: Path) -> None:
    terraform = require_tool("terraform")
    done = run(
        terraform,
        ["fmt", "-check", "-recursive", "-diff", "-no-color", str(TERRAFORM_DIR)],
        tmp_path,
        terraform_env(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("root", [pytest.param(r, id=r) for r in ROOTS])
def test_init_and_validate_offline(root: str, tmp_path: Path) -> None:
    terraform = require_tool("terraform")
    mirror = require_provider_mirror()
    env = terraform_env(tmp_path)
    workdir = copy_tree(tmp_path) / root
    init(terraform, workdir, env, mirror)
    done = run(terraform, ["validate", "-no-color"], workdir, env)
    assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------------ IAM, read from the HCL


def unquote(value: Any) -> Any:
    """python-hcl2 keeps string literals quoted; strip them (recursively)."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    if isinstance(value, list):
        return [unquote(v) for v in value]
    if isinstance(value, dict):
        return {unquote(k): unquote(v) for k, v in value.items() if k != "__is_block__"}
    return value


def blocks(doc: dict[str, Any], kind: str, type_: str) -> dict[str, dict[str, Any]]:
    """name -> body of every ``kind "type_" "name"`` block."""
    out: dict[str, dict[str, Any]] = {}
    for entry in unquote(doc.get(kind, [])):
        for name, body in entry.get(type_, {}).items():
            out[name] = body
    return out


@pytest.fixture(scope="module")
def controller() -> dict[str, Any]:
    with CONTROLLER_MAIN.open(encoding="utf-8") as f:
        return dict(hcl2.load(f))


@pytest.fixture(scope="module")
def task_statements(controller: dict[str, Any]) -> list[dict[str, Any]]:
    policies = blocks(controller, "data", "aws_iam_policy_document")
    assert "task" in policies, "modules/controller has no data.aws_iam_policy_document.task"
    statements = policies["task"]["statement"]
    assert isinstance(statements, list)
    return statements


def test_task_role_uses_the_task_policy_and_nothing_else(controller: dict[str, Any]) -> None:
    role_policies = blocks(controller, "resource", "aws_iam_role_policy")
    on_task_role = {n: b for n, b in role_policies.items() if "aws_iam_role.task." in b["role"]}
    assert [b["policy"] for b in on_task_role.values()] == [
        "${data.aws_iam_policy_document.task.json}"
    ]
    attachments = blocks(controller, "resource", "aws_iam_role_policy_attachment")
    assert not [a for a in attachments.values() if "aws_iam_role.task." in a["role"]], (
        "no managed policy on the task role"
    )
    task_defs = blocks(controller, "resource", "aws_ecs_task_definition")
    assert [t["task_role_arn"] for t in task_defs.values()] == ["${aws_iam_role.task.arn}"]


def test_task_role_allows_exactly_the_adapter_calls(
    task_statements: list[dict[str, Any]],
) -> None:
    granted = {a for s in task_statements for a in s["actions"]}
    assert all(s.get("effect", "Allow") == "Allow" for s in task_statements)
    assert not any("*" in a for a in granted), f"wildcard actions: {sorted(granted)}"
    wanted = set(IAM_ACTIONS) | set(SSM_IAM_ACTIONS) | {SSM_IAM_LIST_ACTION}
    assert granted == wanted, (
        f"missing: {sorted(wanted - granted)}, extra: {sorted(granted - wanted)}"
    )


def test_describe_unconditioned_mutating_only_on_managed_groups(
    task_statements: list[dict[str, Any]],
) -> None:
    kinds = set()
    for statement in task_statements:
        actions = statement["actions"]
        if all(a.startswith("ssm:") for a in actions):
            continue  # the JIT parameters: test_task_role_writes_jit_parameters_on_its_path_only
        describes = {a.split(":", 1)[1].startswith("Describe") for a in actions}
        assert len(describes) == 1, f"keep Describe and mutating calls apart: {actions}"
        conditions = statement.get("condition", [])
        if describes == {True}:
            kinds.add("describe")
            assert not conditions, f"{actions} take no resource conditions"
            continue
        kinds.add("mutating")
        assert any(
            c["test"] == "StringEquals"
            and c["variable"] in MANAGED_CONDITION_KEYS
            and c["values"] == ["true"]
            for c in conditions
        ), f"{actions} must be conditioned on the ci-autoscaler:managed tag"
    assert kinds == {"describe", "mutating"}


def test_no_other_policy_grants_autoscaling_or_ec2() -> None:
    for tf in sorted(TERRAFORM_DIR.rglob("*.tf")):
        with tf.open(encoding="utf-8") as f:
            doc = dict(hcl2.load(f))
        for name, body in blocks(doc, "data", "aws_iam_policy_document").items():
            if tf == CONTROLLER_MAIN and name == "task":
                continue
            for statement in body.get("statement", []):
                scoped = [a for a in statement.get("actions", []) if a.startswith(SCOPED_SERVICES)]
                assert not scoped, f"{tf.relative_to(TERRAFORM_DIR)}: {name} grants {scoped}"


def test_runner_pool_group_is_protected_and_tagged() -> None:
    with (TERRAFORM_DIR / "modules" / "runner-pool" / "main.tf").open(encoding="utf-8") as f:
        doc = dict(hcl2.load(f))
    group = blocks(doc, "resource", "aws_autoscaling_group")["pool"]
    assert group["protect_from_scale_in"] is True
    local_values = {k: v for entry in unquote(doc["locals"]) for k, v in entry.items()}
    assert local_values["managed_tags"] == {
        "ci-autoscaler:managed": "true",
        "ci-autoscaler:runner-type": "${var.runner_type}",
    }


# ------------------------------------------------------------------ the interruption queue


def test_the_task_role_reads_and_deletes_on_the_interruption_queue_only(
    controller: dict[str, Any],
) -> None:
    """With ``interruption_queue``, one more task statement: exactly the calls
    autoscaler/scale/aws/sqs.py makes, on that queue's ARN and nothing else."""
    dynamic = blocks(controller, "data", "aws_iam_policy_document")["task"]["dynamic"]
    (statement,) = [
        d["statement"]
        for d in dynamic
        if "statement" in d and d["statement"]["for_each"] == "${aws_sqs_queue.interruptions}"
    ]
    content = statement["content"]
    content = content[0] if isinstance(content, list) else content
    assert set(content["actions"]) == set(SQS_IAM_ACTIONS)
    assert content["resources"] == ["${statement.value.arn}"]
    assert "condition" not in content


def test_eventbridge_sends_the_ec2_events_the_controller_reads_to_the_queue() -> None:
    with CONTROLLER_INTERRUPTIONS.open(encoding="utf-8") as f:
        doc = dict(hcl2.load(f))
    text = CONTROLLER_INTERRUPTIONS.read_text(encoding="utf-8")
    for detail_type in (SPOT_WARNING, REBALANCE_RECOMMENDATION, STATE_CHANGE, ASG_TERMINATED):
        assert f'"{detail_type}"' in text, detail_type
    targets = blocks(doc, "resource", "aws_cloudwatch_event_target")["interruptions"]
    assert targets["arn"] == "${aws_sqs_queue.interruptions[0].arn}"
    (statement,) = blocks(doc, "data", "aws_iam_policy_document")["interruption_queue"]["statement"]
    assert statement["actions"] == ["sqs:SendMessage"]
    assert statement["principals"][0]["identifiers"] == ["events.amazonaws.com"]
    assert statement["condition"][0]["variable"] == "aws:SourceArn"


# ------------------------------------------------------------------ the state table


@pytest.fixture(scope="module")
def state_statements(controller: dict[str, Any]) -> list[dict[str, Any]]:
    """The task policy's dynamic statements for the table (present once the table exists;
    the interruption queue's has its own test)."""
    task = blocks(controller, "data", "aws_iam_policy_document")["task"]
    return [
        d["statement"]
        for d in task.get("dynamic", [])
        if "statement" in d and d["statement"]["for_each"] != "${aws_sqs_queue.interruptions}"
    ]


def test_the_state_table_statement_grants_its_calls_on_that_table_only(
    state_statements: list[dict[str, Any]],
) -> None:
    [statement] = state_statements
    assert statement["for_each"] == "${aws_dynamodb_table.state}", "only when the table exists"
    [content] = statement["content"]
    assert set(content["actions"]) == STATE_IAM_ACTIONS
    assert content["resources"] == ["${statement.value.arn}"], "that table and nothing else"
    assert "condition" not in content and content.get("effect", "Allow") == "Allow"


def test_no_other_statement_grants_dynamodb(task_statements: list[dict[str, Any]]) -> None:
    for tf in sorted(TERRAFORM_DIR.rglob("*.tf")):
        with tf.open(encoding="utf-8") as f:
            doc = dict(hcl2.load(f))
        for name, body in blocks(doc, "data", "aws_iam_policy_document").items():
            for statement in body.get("statement", []):
                granted = [a for a in statement.get("actions", []) if a.startswith("dynamodb:")]
                assert not granted, f"{tf.relative_to(TERRAFORM_DIR)}: {name} grants {granted}"


def schema_of(table: dict[str, Any]) -> TableSchema:
    """The TableSchema an ``aws_dynamodb_table`` block declares."""
    [ttl] = table["ttl"]
    [pitr] = table["point_in_time_recovery"]
    assert ttl["enabled"] is True
    return TableSchema(
        hash_key=table["hash_key"],
        range_key=table["range_key"],
        attributes=tuple((a["name"], a["type"]) for a in table["attribute"]),
        billing_mode=table["billing_mode"],
        ttl_attribute=ttl["attribute_name"],
        point_in_time_recovery=pitr["enabled"],
    )


def test_create_table_creates_exactly_the_terraform_table(controller: dict[str, Any]) -> None:
    """`ci-autoscaler state create-table` and the module make the same table: keys,
    attribute types, on-demand billing, TTL attribute, point-in-time recovery."""
    table = blocks(controller, "resource", "aws_dynamodb_table")["state"]
    declared = schema_of(table)
    assert declared == SCHEMA
    assert declared.create_request("t") == SCHEMA.create_request("t")
    assert table["billing_mode"] == "PAY_PER_REQUEST"
    assert table["count"] == "${local.high_availability ? 1 : 0}"


def test_two_tasks_and_rolling_deploys_only_with_the_lease(controller: dict[str, Any]) -> None:
    """One task and stop-before-start without the table (two SQLite controllers would both
    scale); two tasks and start-before-stop with it; and a precondition that the config's
    state section agrees with the module's."""
    service = blocks(controller, "resource", "aws_ecs_service")["this"]
    assert service["desired_count"] == "${local.high_availability ? 2 : 1}"
    assert service["deployment_minimum_healthy_percent"] == "${local.high_availability ? 100 : 0}"
    assert service["deployment_maximum_percent"] == "${local.high_availability ? 200 : 100}"
    [lifecycle] = service["lifecycle"]
    [precondition] = lifecycle["precondition"]
    assert "local.config_state.backend" in precondition["condition"]
    assert "var.state_table_name" in precondition["condition"]
    local_values = {k: v for entry in unquote(controller["locals"]) for k, v in entry.items()}
    assert local_values["high_availability"] == "${var.state_table_name != null}"


# ------------------------------------------------------------------ ephemeral runners (JIT)


def test_task_role_writes_jit_parameters_on_its_path_only(
    task_statements: list[dict[str, Any]],
) -> None:
    """The controller's SSM calls (scale/aws/ssm.py) on ``jit.parameter_path`` and below,
    nowhere else."""
    ssm = [s for s in task_statements if any(a.startswith("ssm:") for a in s["actions"])]
    [jit] = [s for s in ssm if SSM_IAM_LIST_ACTION not in s["actions"]]
    assert set(jit["actions"]) == set(SSM_IAM_ACTIONS)
    assert not jit.get("condition")
    for arn in jit["resources"]:
        assert arn.endswith(
            ("parameter${var.jit_parameter_path}", "parameter${var.jit_parameter_path}/*")
        ), arn
    # Listing names only: the one SSM action AWS does not scope to a resource.
    [listing] = [s for s in ssm if SSM_IAM_LIST_ACTION in s["actions"]]
    assert listing["actions"] == [SSM_IAM_LIST_ACTION] and listing["resources"] == ["*"]


def test_instance_reads_only_its_own_parameter() -> None:
    """The runner-pool instance role, in either mode: GetParameter (and DeleteParameter, to
    claim a registration token) on its pool's parameters, only the one tagged (by the
    controller's SsmParameters) with the reading instance's own id; nothing else."""
    with (TERRAFORM_DIR / "modules" / "runner-pool" / "main.tf").open(encoding="utf-8") as f:
        doc = dict(hcl2.load(f))
    policy = blocks(doc, "data", "aws_iam_policy_document")["runner"]
    [own] = policy["statement"]
    assert own["sid"] == "ReadAndClaimOwnCredential"
    assert own["actions"] == ["ssm:GetParameter", "ssm:DeleteParameter"]
    assert own["resources"] == ["${local.own_parameters_arn}"]
    locals_ = {k: v for entry in unquote(doc["locals"]) for k, v in entry.items()}
    assert locals_["own_parameters_arn"].endswith("${var.jit_parameter_path}/${var.pool_name}/*")
    [condition] = own["condition"]
    assert condition["test"] == "StringEquals"
    assert condition["variable"] == f"ssm:resourceTag/{INSTANCE_TAG}"
    assert condition["values"] == ["$${ec2:InstanceID}"]
    dynamic = [c for d in policy.get("dynamic", []) for c in d["statement"]["content"]]
    # only with a warm pool; only with kms_key_arn
    assert [c["sid"] for c in dynamic] == [
        "CompleteOwnGroupLifecycleAction",
        "DecryptOwnCredential",
    ]
    [hook] = [c for c in dynamic if c["sid"] == "CompleteOwnGroupLifecycleAction"]
    assert hook["actions"] == ["autoscaling:CompleteLifecycleAction"]
    assert locals_["group_arn"].endswith(":autoScalingGroupName/${var.pool_name}")


def test_boot_script_reads_the_parameter_the_controller_writes() -> None:
    """The name the boot script asks SSM for is JitConfig.parameter_name's."""
    from autoscaler.config.jit import JitConfig  # noqa: PLC0415

    template = (
        TERRAFORM_DIR / "modules" / "runner-pool" / "templates" / "user-data.sh.tftpl"
    ).read_text(encoding="utf-8")
    assert 'PARAMETER="${jit_parameter_path}/${pool_name}/$${INSTANCE_ID}"' in template
    assert JitConfig(parameter_path="/p").parameter_name("pool", "i-1") == "/p/pool/i-1"
    assert 'run.sh --jitconfig "$CREDENTIAL"' in template
    # persistent: claim the token (delete the parameter) and register only if that worked
    claim = 'if ! aws ssm delete-parameter --region "$REGION" --name "$PARAMETER"; then'
    assert claim in template
    assert template.index(claim) < template.index("./config.sh")
    assert "169.254.169.254/latest/api/token" in template  # IMDSv2 for its instance id


def test_a_reused_instance_registers_again_with_each_stints_fresh_token() -> None:
    """warm_pool.reuse (persistent): back from the warm pool, the machine claims the fresh
    token the controller wrote for this stint, drops its last stint's registration and
    registers with --replace; back in the warm pool it stops taking jobs, and systemd
    starts the next stint."""
    template = (
        TERRAFORM_DIR / "modules" / "runner-pool" / "templates" / "user-data.sh.tftpl"
    ).read_text(encoding="utf-8")
    reuse = template[template.index("%{ if warm_reuse ~}") :]
    claim = template.index('aws ssm delete-parameter --region "$REGION" --name "$PARAMETER"')
    assert claim < template.index("%{ if warm_reuse ~}")  # claimed first, in every mode
    drop = reuse.index("rm -f .runner .credentials .credentials_rsaparams")
    register = reuse.index("./config.sh --unattended --replace --disableupdate")
    assert drop < register < reuse.index("./run.sh &")
    assert "--ephemeral" not in reuse[: reuse.index("%{ else ~}")]
    assert 'kill -INT "$RUNNER_PID"' in reuse
    assert "Restart=always" in template
