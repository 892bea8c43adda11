"""The README's conformance matrix, made again in one command:

    .venv/bin/python scripts/matrix.py [--seed N] [--cluster local:2]

One campaign (specs/campaign.md) of five targets, one `dev` run each: our scripts on the
embedded fakeredis, on Valkey and on Redis 7 (throwaway servers started here), the Node
port (ports/node, `bash scripts/install-node-port.sh` first) on that Valkey, and the
model driver (`emq driver --model`). `emq matrix` draws its report into docs/matrix.html
(the whole matrix) and the summary table between the README's `matrix` markers (each
target's cells by state). Needs valkey-server, redis-server, node and `emq[campaign]`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from emq_kit.server import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "matrix.html"
README = ROOT / "README.md"
MARKERS = re.compile(r"(<!-- matrix: made by scripts/matrix.py -->\n).*?(<!-- /matrix -->)", re.S)
STATES = ("conforms", "differs", "not-implemented", "unreached")


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


def table(body: dict, seed: int) -> str:
    """The README's summary: a row per target, its cells counted by state."""
    lines = ["| target | " + " | ".join(STATES) + " |", "|---|" + "---|" * len(STATES)]
    for c in body["columns"]:
        lines.append(f"| {c['name']} | " + " | ".join(str(c["counts"].get(s, 0)) for s in STATES) + " |")
    causes = [r["name"] for r in body["rows"] if r["kind"] == "cause"]
    lines.append("")
    lines.append(f"`dev` profile, seed {seed}, virtual clock; causes found: {', '.join(causes) or 'none'}. "
                 "Every cell: [docs/matrix.html](docs/matrix.html).")
    return "\n".join(lines) + "\n"


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
        subprocess.run([emq, "matrix", str(report), "--html", str(PAGE), "--report", str(Path(tmp, "matrix.json"))],
                       check=False)
        body = json.loads(Path(tmp, "matrix.json").read_text("utf-8"))["matrix"]
    text = README.read_text("utf-8")
    if not MARKERS.search(text):
        print("scripts/matrix.py: README.md has no matrix markers", file=sys.stderr)
        return 2
    README.write_text(MARKERS.sub(lambda m: m.group(1) + table(body, args.seed) + m.group(2), text), "utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} and the README's table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
