"""``python -m supervisor`` runs the daemon."""

import sys

from supervisor.daemon.main import main

sys.exit(main())
