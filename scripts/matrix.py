"""The README's conformance matrix, made again in one command:

    .venv/bin/python scripts/matrix.py [--seed N] [--cluster local:2]

One campaign (specs/campaign.md) of five targets, one `dev` run each: our scripts on the
embedded fakeredis, on Valkey and on Redis 7 (throwaway servers started here), the Node
port (ports/node, `bash scripts/install-node-port.sh` first) on that Valkey, and the
model driver (`emq driver --model`). `emq matrix` draws its report into docs/matrix.html
(the whole matrix) and the summary table between the README's `matrix` markers (each
target's cells by state; tests/kit/test_matrix.py holds the two to each other). Needs valkey-server, redis-server, node and `emq[campaign]`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from emq_kit.campaign.matrix import summary, with_summary
from emq_kit.errors import BadArgument
from emq_kit.server import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "matrix.html"
README = ROOT / "README.md"


def plan(valkey: str, redis7: str, seed: int, lua: str) -> str:
    """The campaign's plan (specs/schemas/plan.json); ``lua``: the scripts the Node port
    loads (``emq scripts --out``)."""
    emq = Path(sys.executable).with_name("emq")
    return f"""seeds = [{seed}]
profiles = ["dev"]
clocks = ["virtual"]

[[targets]]
name = "fakeredis"

[[targets]]
name = "valkey"
url = "{valkey}"

[[targets]]
name = "redis7"
url = "{redis7}"

[[targets]]
name = "node-port"
url = "{valkey}"
driver = "node {ROOT / 'ports/node/driver.js'} --scripts {lua}"

[[targets]]
name = "model-driver"
driver = "{emq} driver --model"
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cluster", default="local:2")
    args = parser.parse_args()
    emq = str(Path(sys.executable).with_name("emq"))
    with ServerProcess("valkey-server") as valkey, ServerProcess("redis-server") as redis7, \
            tempfile.TemporaryDirectory(prefix="emq-matrix-") as tmp:
        lua = str(Path(tmp, "lua"))
        subprocess.run([emq, "scripts", "--out", lua], check=True, stdout=subprocess.DEVNULL)
        Path(tmp, "plan.toml").write_text(plan(f"{valkey.url}/0", f"{redis7.url}/0", args.seed, lua), "utf-8")
        report = Path(tmp, "campaign.json")
        # the campaign's exit says its verdict (1: a difference or an unreached cell): the matrix shows it
        subprocess.run([emq, "campaign", str(Path(tmp, "plan.toml")), "--cluster", args.cluster, "--out",
                        str(Path(tmp, "out")), "--report", str(report)], check=False)
        if not report.exists():
            return 2
        matrix = Path(tmp, "matrix.json")
        subprocess.run([emq, "matrix", str(report), "--html", str(PAGE), "--report", str(matrix)], check=False)
        body = json.loads(matrix.read_text("utf-8"))["matrix"]
    try:
        README.write_text(with_summary(README.read_text("utf-8"), summary(body, args.seed)), "utf-8")
    except BadArgument as exc:
        print(f"scripts/matrix.py: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {PAGE.relative_to(ROOT)} and the README's table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
