"""The EC2 interruption queue: an SQS queue EventBridge fills, read with long polls.

Narrowed to the two calls used: ``ReceiveMessage`` (a batch of up to 10, long-polled for
``wait_seconds``) and ``DeleteMessageBatch`` (after a message was handled: a message not
deleted comes back after the queue's visibility timeout, so a crash mid-way loses
nothing). Every call is counted in ``ci_autoscaler_aws_calls_total{operation,code}`` and
its errors are translated at this edge (:mod:`autoscaler.aws_sdk`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import boto3

from autoscaler.aws_sdk import aws_call, boto_config
from autoscaler.config import AwsConfig
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)

#: The IAM actions these calls need (DeleteMessageBatch is authorised as DeleteMessage); the
#: terraform task role grants exactly these, on the interruption queue only.
SQS_IAM_ACTIONS: frozenset[str] = frozenset({"sqs:ReceiveMessage", "sqs:DeleteMessage"})
#: SQS's own limits: 10 messages a receive, 20 s the longest long poll.
MAX_BATCH = 10
MAX_WAIT = 20


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """One message: its body (text) and the handle that deletes it."""

    receipt: str
    body: str


class SqsInterruptionQueue:
    """:class:`autoscaler.job_retry.interruptions.InterruptionQueue` over boto3's SQS client."""

    def __init__(
        self,
        queue_url: str,
        config: AwsConfig,
        metrics: Metrics,
        *,
        session: boto3.session.Session | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = MAX_WAIT + 10.0,
    ) -> None:
        session = session if session is not None else boto3.session.Session()
        cfg = boto_config(config, connect_timeout=connect_timeout, read_timeout=read_timeout)
        #: The raw client (tests put messages with it).
        self.sqs: Any = session.client(
            "sqs", region_name=config.region, endpoint_url=config.endpoint_url, config=cfg
        )
        self.queue_url = queue_url
        self.metrics = metrics

    def __repr__(self) -> str:
        return f"SqsInterruptionQueue({self.queue_url!r})"

    def _call(self, operation: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        return aws_call(self.metrics, operation, fn, **kwargs)

    def receive(self, wait_seconds: float, max_messages: int = MAX_BATCH) -> list[QueueMessage]:
        answer = self._call(
            "ReceiveMessage",
            self.sqs.receive_message,
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max(1, min(MAX_BATCH, max_messages)),
            WaitTimeSeconds=max(0, min(MAX_WAIT, round(wait_seconds))),
        )
        out = []
        for m in answer.get("Messages", []) if isinstance(answer, dict) else []:
            receipt, body = m.get("ReceiptHandle"), m.get("Body")
            if isinstance(receipt, str):
                out.append(QueueMessage(receipt, body if isinstance(body, str) else ""))
        return out

    def delete(self, receipts: Sequence[str]) -> int:
        """Delete handled messages; returns how many SQS refused (they come back later)."""
        failed = 0
        for start in range(0, len(receipts), MAX_BATCH):
            chunk = receipts[start : start + MAX_BATCH]
            answer = self._call(
                "DeleteMessageBatch",
                self.sqs.delete_message_batch,
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(chunk)],
            )
            failed += len(answer.get("Failed", [])) if isinstance(answer, dict) else 0
        return failed
