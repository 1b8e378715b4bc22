"""The worker's moto server resets in milliseconds, because its EC2 knows only moto's
default images.

``reset_moto_server`` timed out (10 s) under load: moto's EC2 loaded its catalogue of
about 1,300 images for us-east-1 on every reset, twice, nearly two seconds of CPU each,
in a server that then ran in the test's own process. ``tests/conftest.py`` points
``MOTO_AMIS_PATH`` at moto's 44 default images before anything imports moto, and the
server runs in a process of its own. Should the variable stop reaching the server (a
renamed setting in a new moto, a fixture that drops the environment), this test fails
by name instead of a reset timing out on a busy machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from autoscaler.sim.fleet import aws_clients


def test_the_reset_server_knows_only_motos_default_images(moto_endpoint: str) -> None:
    defaults = json.loads(Path(os.environ["MOTO_AMIS_PATH"]).read_text(encoding="utf-8"))
    _, ec2 = aws_clients(moto_endpoint)
    images = ec2.describe_images()["Images"]
    assert len(images) < 100, f"{len(images)} images: a region's catalogue was loaded"
    assert {i["ImageId"] for i in images} == {d["ami_id"] for d in defaults}
