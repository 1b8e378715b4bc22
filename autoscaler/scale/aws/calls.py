"""One AWS call at the SDK's edge, the same way for every boto3 adapter of the scale stage.

Every call of the Auto Scaling, SSM and SQS adapters goes through :func:`aws_call`: it
times the call, counts it by operation and error code, translates whatever the SDK
raised into our typed errors (:func:`autoscaler.scale.aws.errors.translate`), and logs a
warning when the SDK raised something that is not botocore's own. One place, so a change
to how AWS calls are measured or translated is made once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from autoscaler.scale.aws.errors import translate
from autoscaler.telemetry import Metrics

log = logging.getLogger(__name__)


def aws_call(
    metrics: Metrics,
    operation: str,
    fn: Callable[..., Any],
    /,
    *,
    translate_error: Callable[[Exception, str], Exception] = translate,
    answered: Callable[[Mapping[str, Any]], None] | None = None,
    **kwargs: Any,
) -> Any:
    """``fn(**kwargs)``, timed and counted in ``aws_calls_total`` and
    ``aws_call_duration_seconds`` by ``operation`` and error code ("" on success).

    ``translate_error`` turns what the SDK raised into the exception raised instead (it
    must carry ``.code``); ``answered`` sees every answer AWS sent, a success's body or a
    ClientError's response (the ASG adapter reads AWS's clock from it).
    """
    started = time.perf_counter()
    code = ""
    try:
        result = fn(**kwargs)
        if answered is not None and isinstance(result, Mapping):
            answered(result)
        return result
    except Exception as exc:  # the SDK's edge: whatever it raises is translated
        if answered is not None and isinstance(exc, ClientError):
            answered(exc.response)
        error = translate_error(exc, operation)
        code = str(getattr(error, "code", ""))
        if not isinstance(exc, ClientError | BotoCoreError):
            log.warning("AWS %s: %s inside the SDK call", operation, type(exc).__name__)
        raise error from None
    finally:
        metrics.aws_calls.labels(operation, code).inc()
        metrics.aws_call_duration.labels(operation, code).observe(time.perf_counter() - started)
