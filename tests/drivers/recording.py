"""The model driver, writing every request and reply line it sees to LOG as well.

    python tests/drivers/recording.py LOG
"""

import json
import sys

from emq_kit.check.model_target import ModelTarget
from emq_kit.ports.reference_driver import Driver

driver = Driver("recording", lambda url: ModelTarget(), serverless=True)
with open(sys.argv[1], "a", encoding="utf-8") as log:
    for line in sys.stdin:
        reply = json.dumps(driver.reply(line))
        log.write(line.rstrip("\n") + "\n" + reply + "\n")
        print(reply, flush=True)
        if driver.done:
            break
