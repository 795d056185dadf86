"""`import accelport.auto`: redirect torch.cuda to the available device in this process, logging each API.

The in-process form of `accelport run` for programs that cannot be launched through it:
put `import accelport.auto` before the program's own imports. The device is taken from
ACCELPORT_RUN_DEVICE when set, else the current accelerator, else the CPU. See docs/run.md.
"""

import os

from accelport.runtime import redirect

redirect.install_on_import(os.environ.get(redirect.ENV_DEVICE) or None, os.environ.get(redirect.ENV_RECORD_DIR) or None)
