"""``python -m supervisor.cli`` runs ``supervisorctl``."""

import sys

from supervisor.cli.main import main

sys.exit(main())
