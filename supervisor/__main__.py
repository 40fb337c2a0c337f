"""``python -m supervisor`` runs the daemon."""

import sys

from supervisor.daemon_main import main

sys.exit(main())
